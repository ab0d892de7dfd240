// The public C entry points of libglyd.so. Each one is a thin wrapper over a
// Go export (glydgo_*, hidden by the version script), so the compiler checks
// every prototype in include/glyd.h against its definition here.
#include <stdlib.h>
#include <string.h>

#include "glyd.h"
#include "handles.h"
#include "_cgo_export.h"

// Thread-local message of the last failed call (glyd_last_error).
static __thread char *glydint_tls_err;

void glydint_set_error(const char *msg) {
    free(glydint_tls_err);
    glydint_tls_err = msg ? strdup(msg) : NULL;
}

const char *glyd_last_error(void) { return glydint_tls_err ? glydint_tls_err : ""; }

const char *glyd_version_string(void) { return glydgo_version_string(); }
uint32_t glyd_version_number(void) {
    return GLYD_VERSION_MAJOR * 10000u + GLYD_VERSION_MINOR * 100u + GLYD_VERSION_PATCH;
}
int glyd_abi_version(void) { return GLYD_ABI_VERSION; }
int glyd_format_version(void) { return GLYD_FORMAT_VERSION; }
const char *glyd_strerror(int status) { return glydgo_strerror(status); }

int glyd_pack(const void *src, size_t src_bytes, int dtype, const int64_t *shape, size_t ndim,
              int layout, int64_t groups, int workers, glyd_packed **out) {
    return glydgo_pack((void *)src, src_bytes, dtype, (int64_t *)shape, ndim, layout, groups,
                       workers, out);
}
int glyd_packed_import(int layout, int dtype, const int64_t *shape, size_t ndim,
                       const glyd_group *groups, size_t num_groups,
                       const uint8_t *const planes[GLYD_NUM_PLANES],
                       const size_t plane_lens[GLYD_NUM_PLANES], uint32_t checksum,
                       glyd_packed **out) {
    return glydgo_packed_import(layout, dtype, (int64_t *)shape, ndim, (glyd_group *)groups,
                                num_groups, (uint8_t **)planes, (size_t *)plane_lens, checksum,
                                out);
}
int glyd_packed_describe(const glyd_packed *p, glyd_tensor_info *info) {
    return glydgo_packed_describe((glyd_packed *)p, info);
}
int glyd_packed_group(const glyd_packed *p, uint64_t g, glyd_group *out) {
    return glydgo_packed_group((glyd_packed *)p, g, out);
}
int glyd_packed_plane(const glyd_packed *p, int plane, const uint8_t **data, size_t *len) {
    return glydgo_packed_plane((glyd_packed *)p, plane, (uint8_t **)data, len);
}
int glyd_packed_unpack(const glyd_packed *p, void *dst, size_t dst_bytes, int workers) {
    return glydgo_packed_unpack((glyd_packed *)p, dst, dst_bytes, workers);
}
int glyd_packed_unpack_group(const glyd_packed *p, uint64_t g, void *dst, size_t dst_bytes) {
    return glydgo_packed_unpack_group((glyd_packed *)p, g, dst, dst_bytes);
}
int glyd_packed_verify(const glyd_packed *p, int workers) {
    return glydgo_packed_verify((glyd_packed *)p, workers);
}
void glyd_packed_destroy(glyd_packed *p) {
    if (p) glydgo_packed_destroy(p);
}

int glyd_writer_open(const char *dir, uint64_t max_shard_size, uint32_t flags, glyd_writer **out) {
    return glydgo_writer_open((char *)dir, max_shard_size, flags, out);
}
const char *glyd_writer_temp_dir(const glyd_writer *w) { return w ? w->temp_dir : NULL; }
int glyd_writer_add_packed(glyd_writer *w, const char *name, const glyd_packed *p) {
    return glydgo_writer_add_packed(w, (char *)name, (glyd_packed *)p);
}
int glyd_writer_add_raw(glyd_writer *w, const char *name, const char *dtype, const int64_t *shape,
                        size_t ndim, const void *data, size_t nbytes) {
    return glydgo_writer_add_raw(w, (char *)name, (char *)dtype, (int64_t *)shape, ndim,
                                 (void *)data, nbytes);
}
int glyd_writer_commit(glyd_writer *w) { return glydgo_writer_commit(w); }
int glyd_writer_abort(glyd_writer *w) { return glydgo_writer_abort(w); }
void glyd_writer_destroy(glyd_writer *w) {
    if (w) glydgo_writer_destroy(w);
}
const char *glyd_writer_errmsg(const glyd_writer *w) {
    return w && w->errmsg ? w->errmsg : "";
}

int glyd_reader_open(const char *dir, int max_format_version, glyd_reader **out) {
    return glydgo_reader_open((char *)dir, max_format_version, out);
}
const char *glyd_reader_format(const glyd_reader *r) { return r ? r->format : NULL; }
size_t glyd_reader_count(const glyd_reader *r) { return r ? r->count : 0; }
int glyd_reader_name(const glyd_reader *r, size_t i, const char **name) {
    return glydgo_reader_name((glyd_reader *)r, i, (char **)name);
}
int glyd_reader_find(const glyd_reader *r, const char *name, size_t *i) {
    return glydgo_reader_find((glyd_reader *)r, (char *)name, i);
}
int glyd_reader_describe(const glyd_reader *r, size_t i, glyd_tensor_info *info) {
    return glydgo_reader_describe((glyd_reader *)r, i, info);
}
int glyd_reader_group(const glyd_reader *r, size_t i, uint64_t g, glyd_group *out) {
    return glydgo_reader_group((glyd_reader *)r, i, g, out);
}
int glyd_reader_plane(const glyd_reader *r, size_t i, int plane, const uint8_t **data,
                      size_t *len) {
    return glydgo_reader_plane((glyd_reader *)r, i, plane, (uint8_t **)data, len);
}
int glyd_reader_raw(const glyd_reader *r, size_t i, const void **data, size_t *len) {
    return glydgo_reader_raw((glyd_reader *)r, i, (void **)data, len);
}
int glyd_reader_unpack(const glyd_reader *r, size_t i, void *dst, size_t dst_bytes) {
    return glydgo_reader_unpack((glyd_reader *)r, i, dst, dst_bytes);
}
int glyd_reader_verify(const glyd_reader *r, size_t i) {
    return glydgo_reader_verify((glyd_reader *)r, i);
}
void glyd_reader_close(glyd_reader *r) {
    if (r) glydgo_reader_close(r);
}
const char *glyd_reader_errmsg(const glyd_reader *r) {
    return r && r->errmsg ? r->errmsg : "";
}
