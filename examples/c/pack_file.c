/*
 * pack_file: pack a file of raw bf16 values into a Glyd checkpoint, read it
 * back, verify it, and check that every value decodes to its exact bits.
 *
 *   pack_file INPUT.bf16 OUTPUT_DIR [fixed12|smallest]
 *
 * Built against include/glyd.h and -lglyd only.
 */
#include <glyd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                    \
    do {                                                                               \
        int rc_ = (call);                                                              \
        if (rc_ != GLYD_OK) {                                                          \
            fprintf(stderr, "%s failed: %s (%s)\n", #call, glyd_strerror(rc_),         \
                    glyd_last_error());                                                \
            return 1;                                                                  \
        }                                                                              \
    } while (0)

static unsigned char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return buf;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s INPUT.bf16 OUTPUT_DIR [fixed12|smallest]\n", argv[0]);
        return 2;
    }
    int layout = GLYD_LAYOUT_FIXED12;
    if (argc > 3 && strcmp(argv[3], "smallest") == 0) layout = GLYD_LAYOUT_SMALLEST;
    if (glyd_abi_version() != GLYD_ABI_VERSION) {
        fprintf(stderr, "libglyd ABI %d, header %d\n", glyd_abi_version(), GLYD_ABI_VERSION);
        return 1;
    }
    printf("libglyd %s, formats up to glyd-v%d\n", glyd_version_string(), glyd_format_version());

    size_t len = 0;
    unsigned char *data = read_file(argv[1], &len);
    if (!data) {
        perror(argv[1]);
        return 1;
    }
    len &= ~(size_t)1; /* whole bf16 values only */
    int64_t shape[1] = {(int64_t)(len / 2)};

    glyd_packed *packed = NULL;
    CHECK(glyd_pack(data, len, GLYD_DTYPE_BF16, shape, 1, layout, 1, 0, &packed));
    glyd_tensor_info info;
    CHECK(glyd_packed_describe(packed, &info));
    printf("packed %llu values: %.3f bits/weight, %llu escapes\n",
           (unsigned long long)info.elements, info.bits_per_weight,
           (unsigned long long)info.escapes);

    glyd_writer *w = NULL;
    CHECK(glyd_writer_open(argv[2], 0, GLYD_WRITER_OVERWRITE, &w));
    CHECK(glyd_writer_add_packed(w, "weights", packed));
    CHECK(glyd_writer_commit(w));
    glyd_writer_destroy(w);
    glyd_packed_destroy(packed);

    glyd_reader *r = NULL;
    CHECK(glyd_reader_open(argv[2], 0, &r));
    size_t i = 0;
    CHECK(glyd_reader_find(r, "weights", &i));
    CHECK(glyd_reader_verify(r, i));
    unsigned char *back = malloc(len ? len : 1);
    CHECK(glyd_reader_unpack(r, i, back, len));
    int same = memcmp(back, data, len) == 0;
    printf("%s: format %s, verified, round trip %s\n", argv[2], glyd_reader_format(r),
           same ? "exact" : "DIFFERENT");
    glyd_reader_close(r);
    free(back);
    free(data);
    return same ? 0 : 1;
}
