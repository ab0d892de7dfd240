// Layout of the opaque handles of include/glyd.h, private to libglyd.
#ifndef GLYD_CAPI_HANDLES_H
#define GLYD_CAPI_HANDLES_H
#include <stddef.h>
#include <stdint.h>

// id is a runtime/cgo.Handle of the Go object behind the handle.
struct glyd_packed {
    uintptr_t id;
};
struct glyd_writer {
    uintptr_t id;
    char *temp_dir;  // C copy of the writer's temporary folder
    char *errmsg;    // last failed call's message, or NULL
};
struct glyd_reader {
    uintptr_t id;
    char *format;    // "glyd-v1" / "glyd-v2"
    char **names;    // count tensor names, sorted
    size_t count;
    char *errmsg;
};

void glydint_set_error(const char *msg);
#endif
