"""How many thread-block clusters of each size fit on the GPU at once, per fused-linear kernel
(cuOccupancyMaxActiveClusters on the fatbin in the checkout): `python
python/benchmarks/cluster_probe.py` from the repository root, on an sm_90 GPU. The split-K
launches run as clusters only where all of their clusters fit (core/gpu/linear.go, inClusters);
this table (docs/PERFORMANCE.md, session 17) is why that is rare at 9-128 tokens. The threads and
dynamic shared memory per kernel are core/gpu/linear.go's (linConfig.threads, smem) as of
session 17 (t64s4w2: session 29)."""

import ctypes as C

CLUSTER_DIMENSION = 4  # CUlaunchAttributeID
MAX_DYNAMIC_SHARED_SIZE_BYTES = 8  # CUfunction_attribute
KERNELS = [  # name, threads, dynamic shared memory
    ("glyd_lin_f12w_t16k2s4u2p2", 320, 8576),
    ("glyd_lin_f12w_t32k2s4u2p2", 320, 16768),
    ("glyd_lin_f12w_t32k1s4u4p2", 192, 16768),
    ("glyd_lin_f12w_t64k1s4u4p4", 256, 33152),
    ("glyd_lin_f12p_t64s4u2", 256, 34816),
    ("glyd_lin_f12p_t64s4w2", 256, 58368),
    ("glyd_lin_f12p_t128s4w4", 256, 115712),
    ("glyd_lin_f12p_t256s4u2", 256, 136192),
]


class Attr(C.Structure):  # CUlaunchAttribute with a clusterDim value
    _fields_ = [("id", C.c_int), ("pad", C.c_char * 4), ("x", C.c_uint), ("y", C.c_uint), ("z", C.c_uint),
                ("rest", C.c_char * 52)]


class Config(C.Structure):  # CUlaunchConfig
    _fields_ = [("gx", C.c_uint), ("gy", C.c_uint), ("gz", C.c_uint), ("bx", C.c_uint), ("by", C.c_uint),
                ("bz", C.c_uint), ("smem", C.c_uint), ("stream", C.c_void_p), ("attrs", C.POINTER(Attr)),
                ("nattrs", C.c_uint)]


cu = C.CDLL("libcuda.so.1")


def check(rc, what):
    if rc:
        raise RuntimeError(f"{what} failed: CUresult {rc}")


check(cu.cuInit(0), "cuInit")
dev, ctx, mod = C.c_int(), C.c_void_p(), C.c_void_p()
check(cu.cuDeviceGet(C.byref(dev), 0), "cuDeviceGet")
check(cu.cuDevicePrimaryCtxRetain(C.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
with open("core/gpu/kernels.fatbin", "rb") as f:
    image = f.read()
check(cu.cuModuleLoadData(C.byref(mod), C.c_char_p(image)), "cuModuleLoadData")
sms = C.c_int()
check(cu.cuDeviceGetAttribute(C.byref(sms), 16, dev), "cuDeviceGetAttribute")  # multiprocessors

print(f"| kernel | blocks per SM | slots ({sms.value} SMs) | clusters of 2 / 3 / 4 / 5 / 6 / 8 that fit (blocks) |")
print("|---|---:|---:|---|")
for name, threads, smem in KERNELS:
    fn = C.c_void_p()
    check(cu.cuModuleGetFunction(C.byref(fn), mod, name.encode()), name)
    check(cu.cuFuncSetAttribute(fn, MAX_DYNAMIC_SHARED_SIZE_BYTES, smem), "cuFuncSetAttribute")
    blocks = C.c_int()
    check(cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(C.byref(blocks), fn, threads, C.c_size_t(smem)), "occupancy")
    fits = []
    for cz in (2, 3, 4, 5, 6, 8):
        attr = Attr(id=CLUSTER_DIMENSION, x=1, y=1, z=cz)
        cfg = Config(1, 1, cz, threads, 1, 1, smem, None, C.pointer(attr), 1)
        n = C.c_int()
        check(cu.cuOccupancyMaxActiveClusters(C.byref(n), fn, C.byref(cfg)), "cuOccupancyMaxActiveClusters")
        fits.append(f"{n.value} ({n.value * cz})")
    print(f"| {name} | {blocks.value} | {blocks.value * sms.value} | {' / '.join(fits)} |")
