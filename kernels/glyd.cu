/*
 * glyd.cu — the one translation unit nvcc compiles into kernels/glyd.fatbin
 * (a single fatbin for every architecture, embedded by core/gpu). The kernels
 * and their contracts live in the files included below.
 */
#include "decode.cu"
#include "linear.cu"
#include "pack.cu"
#include "moe.cu"
#include "tile.cu"
