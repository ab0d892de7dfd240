// The glyd_gpu_* entry points of include/glyd.h: thin wrappers over the
// glydgo_gpu_* exports of gpu.go, so the compiler checks each prototype
// against its definition (the convention of glyd.c).
#include "glyd.h"
#include "_cgo_export.h"

int glyd_gpu_init(void) { return glydgo_gpu_init(); }
int glyd_gpu_device_count(int *count) { return glydgo_gpu_device_count(count); }
int glyd_gpu_device_info(int device, glyd_gpu_info *info) {
    return glydgo_gpu_device_info(device, info);
}
int glyd_gpu_decode(int device, void *stream, const glyd_gpu_tensor *t, int64_t group, void *dst,
                    size_t dst_bytes) {
    return glydgo_gpu_decode(device, stream, (glyd_gpu_tensor *)t, group, dst, dst_bytes);
}
int glyd_gpu_decode_rows(int device, void *stream, const glyd_gpu_tensor *t, int64_t row0,
                         int64_t rows, void *dst, size_t dst_bytes) {
    return glydgo_gpu_decode_rows(device, stream, (glyd_gpu_tensor *)t, row0, rows, dst, dst_bytes);
}
int glyd_gpu_decode_gather(int device, void *stream, const glyd_gpu_tensor *t, const int64_t *ids,
                           int64_t count, void *dst, size_t dst_bytes) {
    return glydgo_gpu_decode_gather(device, stream, (glyd_gpu_tensor *)t, (void *)ids, count, dst, dst_bytes);
}
int glyd_gpu_tile(int device, void *stream, const glyd_gpu_tensor *t, void *sm_dst, void *code_dst) {
    return glydgo_gpu_tile(device, stream, (glyd_gpu_tensor *)t, sm_dst, code_dst);
}
int glyd_gpu_escape_index_bytes(const glyd_gpu_tensor *t, size_t *bytes) {
    return glydgo_gpu_escape_index_bytes((glyd_gpu_tensor *)t, bytes);
}
int glyd_gpu_build_escape_index(int device, void *stream, const glyd_gpu_tensor *t, void *dst,
                                size_t dst_bytes) {
    return glydgo_gpu_build_escape_index(device, stream, (glyd_gpu_tensor *)t, dst, dst_bytes);
}
int glyd_gpu_linear_workspace_bound(const glyd_gpu_tensor *w, int64_t rows, size_t *bytes) {
    return glydgo_gpu_linear_workspace_bound((glyd_gpu_tensor *)w, rows, bytes);
}
int glyd_gpu_linear(int device, void *stream, const void *x, int64_t rows, const glyd_gpu_tensor *w,
                    const void *bias, void *y, void *workspace, size_t workspace_bytes) {
    return glydgo_gpu_linear(device, stream, (void *)x, rows, (glyd_gpu_tensor *)w, (void *)bias, y,
                             workspace, workspace_bytes);
}
int glyd_gpu_linear_many_workspace_bound(const glyd_gpu_tensor *w, size_t count, int64_t rows, size_t *bytes) {
    return glydgo_gpu_linear_many_workspace_bound((glyd_gpu_tensor *)w, count, rows, bytes);
}
int glyd_gpu_linear_many(int device, void *stream, const void *x, int64_t rows, const glyd_gpu_tensor *w,
                         size_t count, const void *const *bias, void *y, void *workspace,
                         size_t workspace_bytes) {
    return glydgo_gpu_linear_many(device, stream, (void *)x, rows, (glyd_gpu_tensor *)w, count, (void **)bias, y,
                                  workspace, workspace_bytes);
}
int glyd_gpu_linear_kernel(int device, const glyd_gpu_tensor *w, int64_t rows, const char **name) {
    return glydgo_gpu_linear_kernel(device, (glyd_gpu_tensor *)w, rows, (char **)name);
}
int glyd_gpu_linear_split(int device, const glyd_gpu_tensor *w, int64_t rows, int *splits, int *clusters) {
    return glydgo_gpu_linear_split(device, (glyd_gpu_tensor *)w, rows, splits, clusters);
}
int glyd_gpu_force_kernel(const char *name) { return glydgo_gpu_force_kernel((char *)name); }
int glyd_gpu_linear_configs(const char **names) { return glydgo_gpu_linear_configs((char **)names); }
int glyd_gpu_pack_workspace_bytes(int dtype, int layout, const int64_t *shape, size_t ndim,
                                  int64_t groups, size_t *bytes) {
    return glydgo_gpu_pack_workspace_bytes(dtype, layout, (int64_t *)shape, ndim, groups, bytes);
}
int glyd_gpu_pack_bound(int device, void *stream, const void *src, int dtype, int layout,
                        const int64_t *shape, size_t ndim, int64_t groups, void *workspace,
                        size_t workspace_bytes, uint64_t plane_bytes[GLYD_NUM_PLANES]) {
    return glydgo_gpu_pack_bound(device, stream, (void *)src, dtype, layout, (int64_t *)shape, ndim,
                                 groups, workspace, workspace_bytes, plane_bytes);
}
int glyd_gpu_pack(int device, void *stream, const void *src, int dtype, int layout,
                  const int64_t *shape, size_t ndim, int64_t groups, void *workspace,
                  size_t workspace_bytes, void *const planes[GLYD_NUM_PLANES],
                  const uint64_t plane_bytes[GLYD_NUM_PLANES], glyd_group *groups_out,
                  uint32_t *checksum) {
    return glydgo_gpu_pack(device, stream, (void *)src, dtype, layout, (int64_t *)shape, ndim, groups,
                           workspace, workspace_bytes, (void **)planes, (uint64_t *)plane_bytes,
                           groups_out, checksum);
}
int glyd_gpu_experts_table_bytes(const glyd_gpu_tensor *w, size_t *bytes) {
    return glydgo_gpu_experts_table_bytes((glyd_gpu_tensor *)w, bytes);
}
int glyd_gpu_build_experts_table(int device, void *stream, const glyd_gpu_tensor *w, void *dst,
                                 size_t dst_bytes) {
    return glydgo_gpu_build_experts_table(device, stream, (glyd_gpu_tensor *)w, dst, dst_bytes);
}
int glyd_gpu_decode_experts(int device, void *stream, const glyd_gpu_tensor *w, const void *table,
                            void *dst, size_t dst_bytes) {
    return glydgo_gpu_decode_experts(device, stream, (glyd_gpu_tensor *)w, (void *)table, dst,
                                     dst_bytes);
}
int glyd_gpu_experts_workspace_bound(const glyd_gpu_tensor *w, int64_t rows, int transposed,
                                     size_t *bytes) {
    return glydgo_gpu_experts_workspace_bound((glyd_gpu_tensor *)w, rows, transposed, bytes);
}
int glyd_gpu_linear_experts(int device, void *stream, const void *x, int64_t rows,
                            const glyd_gpu_tensor *w, int transposed, const void *table,
                            const void *offsets, const void *bias, void *y, void *workspace,
                            size_t workspace_bytes) {
    return glydgo_gpu_linear_experts(device, stream, (void *)x, rows, (glyd_gpu_tensor *)w,
                                     transposed, (void *)table, (void *)offsets, (void *)bias, y,
                                     workspace, workspace_bytes);
}
int glyd_gpu_moe_route(int device, void *stream, const int64_t *ids, int64_t pairs, int64_t topk,
                       int64_t experts, int64_t total, int32_t *offsets, int32_t *tokens,
                       int32_t *rows) {
    return glydgo_gpu_moe_route(device, stream, (void *)ids, pairs, topk, experts, total, offsets,
                                tokens, rows);
}
int glyd_gpu_moe_combine(int device, void *stream, const void *x, const void *d, const float *w,
                         const int64_t *ids, const int32_t *rows, int64_t tokens, int64_t topk,
                         int64_t hidden, int64_t experts, int64_t total, void *out) {
    return glydgo_gpu_moe_combine(device, stream, (void *)x, (void *)d, (void *)w, (void *)ids,
                                  (void *)rows, tokens, topk, hidden, experts, total, out);
}
int glyd_gpu_moe_silu_mul(int device, void *stream, const void *x, int64_t rows, int64_t inter,
                          void *out) {
    return glydgo_gpu_moe_silu_mul(device, stream, (void *)x, rows, inter, out);
}
int glyd_gpu_moe_row_experts(int device, void *stream, const void *x, int64_t rows, int64_t hidden,
                             int64_t rows_per_expert, int64_t *ids) {
    return glydgo_gpu_moe_row_experts(device, stream, (void *)x, rows, hidden, rows_per_expert, ids);
}
int glyd_gpu_moe_top1(int device, void *stream, const void *logits, int64_t tokens, int64_t experts,
                      int64_t *ids, void *score) {
    return glydgo_gpu_moe_top1(device, stream, (void *)logits, tokens, experts, ids, score);
}
int glyd_gpu_moe_gather_scale(int device, void *stream, const void *x, const int32_t *tokens,
                              const void *score, int64_t rows, int64_t hidden, void *out) {
    return glydgo_gpu_moe_gather_scale(device, stream, (void *)x, (void *)tokens, (void *)score, rows, hidden, out);
}
