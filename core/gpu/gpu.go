// Package gpu is Glyd's CUDA runtime: a small driver layer that loads
// libcuda.so.1 with dlopen at the first GPU call (never linked, so the library
// also loads on machines without a GPU), and launches the kernels of
// kernels/*.cu, compiled ahead of time into one fatbin embedded here.
//
// Rules every function follows (docs/DESIGN.md D1–D4):
//   - Device memory belongs to the caller. Nothing here allocates device memory
//     or synchronizes: every launch goes on the caller's stream (a CUstream /
//     cudaStream_t as uintptr; 0 is the legacy default stream), so calls can be
//     captured in CUDA graphs.
//   - CUDA calls run on the calling thread, inside a push/pop of the device's
//     primary context (the one PyTorch uses), so the caller's current context
//     is left untouched.
//   - Errors carry a status code: status.NoGPU (no driver, no device; the
//     message says why), status.CUDA (the driver's error name), status.Unsupported,
//     status.InvalidArgument.
package gpu

/*
#cgo CFLAGS: -O2 -std=c99 -Wall
#cgo LDFLAGS: -ldl -lpthread
#include <stdlib.h>
#include "driver.h"
*/
import "C"

import (
	_ "embed"
	"os"
	"strings"
	"sync"
	"unsafe"

	"github.com/glyd/glyd/core/status"
)

//go:embed kernels.fatbin
var fatbin []byte

// drvErr turns a glyd_drv_* result into an error.
func drvErr(rc C.int, err *[C.GLYD_ERRLEN]C.char) error {
	if rc == C.GLYD_DRV_OK {
		return nil
	}
	msg := "gpu: " + C.GoString(&err[0])
	switch rc {
	case C.GLYD_DRV_NO_GPU:
		return status.Errorf(status.NoGPU, "%s", msg)
	case C.GLYD_DRV_UNSUPPORTED:
		return status.Errorf(status.Unsupported, "%s", msg)
	case C.GLYD_DRV_ARG:
		return status.Errorf(status.InvalidArgument, "%s", msg)
	default:
		return status.Errorf(status.CUDA, "%s", msg)
	}
}

// Init loads the CUDA driver once per process. It returns a status.NoGPU
// error, with the reason, where no usable driver or device exists; the
// result of the first call is kept.
func Init() error {
	var e [C.GLYD_ERRLEN]C.char
	return drvErr(C.glyd_drv_init(&e[0]), &e)
}

// DriverVersion returns the CUDA version the driver supports, as
// 1000*major + 10*minor (13000 for CUDA 13.0).
func DriverVersion() (int, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var v C.int
	C.glyd_drv_version(&v)
	return int(v), nil
}

// DeviceCount returns the number of CUDA devices.
func DeviceCount() (int, error) {
	var e [C.GLYD_ERRLEN]C.char
	var n C.int
	if err := drvErr(C.glyd_drv_device_count(&n, &e[0]), &e); err != nil {
		return 0, err
	}
	return int(n), nil
}

// Info describes one device, read from the driver.
type Info struct {
	Name          string
	Major, Minor  int    // compute capability
	SMs           int    // multiprocessors
	SharedOptin   int    // max shared memory per block with opt-in, bytes
	SharedPerSM   int    // shared memory per multiprocessor, bytes
	L2Bytes       int    // L2 cache size
	ClockKHz      int    // SM clock
	MemClockKHz   int    // memory clock
	BusWidth      int    // memory bus width, bits
	TotalMem      uint64 // device memory, bytes
	DriverVersion int    // 1000*major + 10*minor
}

// DeviceInfo returns the properties of device dev.
func DeviceInfo(dev int) (Info, error) {
	var e [C.GLYD_ERRLEN]C.char
	var ci C.glyd_devinfo
	if err := drvErr(C.glyd_drv_device_info(C.int(dev), &ci, &e[0]), &e); err != nil {
		return Info{}, err
	}
	v, _ := DriverVersion()
	return Info{
		Name: C.GoString(&ci.name[0]), Major: int(ci.cc_major), Minor: int(ci.cc_minor),
		SMs: int(ci.sms), SharedOptin: int(ci.smem_optin), SharedPerSM: int(ci.smem_per_sm),
		L2Bytes: int(ci.l2_bytes), ClockKHz: int(ci.clock_khz), MemClockKHz: int(ci.mem_clock_khz),
		BusWidth: int(ci.bus_width), TotalMem: uint64(ci.total_mem), DriverVersion: v,
	}, nil
}

// kernel names, in the order of the k* constants; looked up at module load.
var kernelNames = []string{
	"glyd_decode_f12_vec",
	"glyd_decode_f12_scalar",
	"glyd_decode_small",
	"glyd_escape_scatter",
	"glyd_escape_rows",
	"glyd_escape_records",
	"glyd_escape_scatter_rows",
	"glyd_lin_f12_generic",
	"glyd_lin_reduce",
	"glyd_lin_reduce_many",
	"glyd_pack_zero",
	"glyd_pack_hist",
	"glyd_pack_crc",
	"glyd_pack_count",
	"glyd_pack_f12",
	"glyd_pack_small_count",
	"glyd_pack_small",
	"glyd_decode_f12_groups",
	"glyd_escape_scatter_groups",
	"glyd_lin_f12t_experts",
	"glyd_lin_f12t1_experts",
	"glyd_lin_f12t_reduce",
	"glyd_moe_route",
	"glyd_moe_combine",
	"glyd_moe_silu_mul",
	"glyd_moe_row_experts",
	"glyd_moe_top1",
	"glyd_moe_gather_scale",
	"glyd_lin_xperm_t64",
	"glyd_lin_xperm_t128",
	"glyd_lin_xperm_t256",
	"glyd_decode_f12_bulk",
	"glyd_decode_f12_gather",
	"glyd_tile_bytes",
}

const (
	kDecodeF12Vec = iota
	kDecodeF12Scalar
	kDecodeSmall
	kEscapeScatter
	kEscapeRows
	kEscapeRecords
	kEscapeScatterRows
	kLinGeneric
	kLinReduce
	kLinReduceMany
	kPackZero
	kPackHist
	kPackCRC
	kPackCount
	kPackF12
	kPackSmallCount
	kPackSmall
	kDecodeF12Groups
	kEscapeScatterGroups
	kLinTransposed
	kLinTransposed1
	kLinTransposedReduce
	kMoeRoute
	kMoeCombine
	kMoeSiluMul
	kMoeRowExperts
	kMoeTop1
	kMoeGatherScale
	kLinXperm // glyd_lin_xperm_t{64,128,256}: xpermKernel
	_
	_
	kDecodeF12Bulk
	kDecodeF12Gather
	kTileBytes
	kLinFirst // the linear configurations of linear.go follow, each name, name_safe, name_many, name_many_safe,
	// then the grouped ones of moe.go (kGroupedFirst)
)

// maxKernels is how many kernels the driver layer resolves per module.
const maxKernels = C.GLYD_MAX_KERNELS

// kGroupedFirst is the index of the first grouped configuration's kernel.
var kGroupedFirst = kLinFirst + 4*len(linConfigs)

func init() {
	for _, c := range linConfigs {
		kernelNames = append(kernelNames, c.name(), c.name()+"_safe", c.name()+"_many", c.name()+"_many_safe")
	}
	for _, c := range groupedConfigs {
		kernelNames = append(kernelNames, c.groupedName(), c.groupedName()+"_safe")
	}
}

// maxDynSmem is the largest dynamic shared memory any configuration asks for.
const maxDynSmem = 140 * 1024

type device struct {
	once sync.Once
	err  error
	info Info
	occ  [][2]int // resident blocks per SM of each linear configuration: single, _many
	// clusters[i][many][s]: clusters of s blocks of configuration i that fit
	// on the GPU at once (configurations with Clusters on sm_90, s = 2..8;
	// else 0).
	clusters [][2][9]int
}

var devices [C.GLYD_MAX_DEVICES]device

// load makes device dev ready (module loaded, kernels resolved) once.
func load(dev int) (*device, error) {
	if dev < 0 || dev >= len(devices) {
		return nil, status.Errorf(status.InvalidArgument, "gpu: device %d out of range", dev)
	}
	d := &devices[dev]
	d.once.Do(func() {
		info, err := DeviceInfo(dev)
		if err != nil {
			d.err = err
			return
		}
		d.info = info
		if info.Major < 8 {
			d.err = status.Errorf(status.Unsupported, "gpu: %s has compute capability %d.%d; Glyd kernels need 8.0 or newer", info.Name, info.Major, info.Minor)
			return
		}
		names := C.CString(strings.Join(kernelNames, "\x00") + "\x00")
		defer C.free(unsafe.Pointer(names))
		// The image is copied to C memory once per device and kept: the driver
		// may read it after cuModuleLoadData returns (it does not, today).
		img := C.CBytes(fatbin)
		smem := maxDynSmem
		if smem > info.SharedOptin {
			smem = info.SharedOptin
		}
		var e [C.GLYD_ERRLEN]C.char
		d.err = drvErr(C.glyd_drv_device_load(C.int(dev), img, names, C.int(len(kernelNames)), C.int(smem), &e[0]), &e)
		if d.err != nil {
			return
		}
		d.occ = make([][2]int, len(linConfigs))
		for i, c := range linConfigs {
			for many := range 2 {
				var nb C.int
				if err := drvErr(C.glyd_drv_occupancy(C.int(dev), C.int(linKernel(i, many == 1, false)), C.int(c.threads()), C.int(c.smem()), &nb, &e[0]), &e); err != nil {
					d.err = err
					return
				}
				d.occ[i][many] = int(nb)
			}
		}
		d.clusters = make([][2][9]int, len(linConfigs))
		for i, c := range linConfigs {
			if !c.Clusters || !d.hopper() {
				continue
			}
			for many := range 2 {
				for s := 2; s <= 8; s++ {
					var nc C.int
					if err := drvErr(C.glyd_drv_max_clusters(C.int(dev), C.int(linKernel(i, many == 1, false)), C.int(c.threads()), C.int(c.smem()), C.int(s), &nc, &e[0]), &e); err != nil {
						d.err = err
						return
					}
					d.clusters[i][many][s] = int(nc)
				}
			}
		}
	})
	return d, d.err
}

// linKernel is the kernel index of configuration ci: the several-weights
// (_many) variant or not, the _safe one or not.
func linKernel(ci int, many, safe bool) int {
	k := kLinFirst + 4*ci
	if many {
		k += 2
	}
	if safe {
		k++
	}
	return k
}

// hopper reports an sm_90 GPU (H100, H200): the fatbin's sm_90a image has
// the wgmma kernels.
func (d *device) hopper() bool { return d.info.Major == 9 && d.info.Minor == 0 }

// programmatic reports whether kernels that wait for their predecessor
// (griddep_wait, kernels/common.cuh) are launched as programmatic dependent
// launches: on sm_90, unless GLYD_PDL=0 (benchmarks: the same kernels
// launched plainly).
func (d *device) programmatic() bool { return d.hopper() && programmaticLaunches }

var programmaticLaunches = os.Getenv("GLYD_PDL") != "0"

// canRun reports UNSUPPORTED when configuration c (kernel name) cannot run
// on the device: the wgmma kernels exist for sm_90 only (a forced choice
// elsewhere).
func (d *device) canRun(c linConfig, name string) error {
	if c.hopperOnly() && !d.hopper() {
		return status.Errorf(status.Unsupported, "gpu: %s needs an sm_90 GPU; %s is %d.%d", name, d.info.Name, d.info.Major, d.info.Minor)
	}
	return nil
}

// launch runs kernel k on the caller's stream.
func launch(dev, k int, gx, gy, gz uint32, block, smem uint32, stream uintptr, p *C.glyd_kparams) error {
	return launchAs(dev, k, gx, gy, gz, block, smem, stream, p, false)
}

// launchAs is launch, as a programmatic dependent launch if programmatic:
// the kernel may start while the stream's previous kernel finishes, and
// waits for it (griddepcontrol.wait) before it reads the activations or
// writes anything (kernels/common.cuh, griddep_wait).
func launchAs(dev, k int, gx, gy, gz uint32, block, smem uint32, stream uintptr, p *C.glyd_kparams, programmatic bool) error {
	return launchClusters(dev, k, gx, gy, gz, block, smem, stream, p, programmatic, 1)
}

// launchClusters is launchAs with the blocks in clusters of (1, 1, cz)
// (sm_90; gz a multiple of cz): the blocks of a cluster run at once and read
// each other's shared memory.
func launchClusters(dev, k int, gx, gy, gz uint32, block, smem uint32, stream uintptr, p *C.glyd_kparams, programmatic bool, cz uint32) error {
	var e [C.GLYD_ERRLEN]C.char
	pr := C.int(0)
	if programmatic {
		pr = 1
	}
	rc := C.glyd_drv_launch(C.int(dev), C.int(k), C.uint(gx), C.uint(gy), C.uint(gz), C.uint(block), C.uint(smem), C.uintptr_t(stream), p, pr, C.uint(cz), &e[0])
	return drvErr(rc, &e)
}

// KernelAttrs reports registers, local memory and max threads of a kernel by
// name, for diagnostics (after the device has been used once).
func KernelAttrs(dev int, name string) (regs, localBytes, maxThreads int, err error) {
	if _, err = load(dev); err != nil {
		return
	}
	for k, n := range kernelNames {
		if n == name {
			var e [C.GLYD_ERRLEN]C.char
			var r, l, m C.int
			err = drvErr(C.glyd_drv_kernel_attrs(C.int(dev), C.int(k), &r, &l, &m, &e[0]), &e)
			return int(r), int(l), int(m), err
		}
	}
	return 0, 0, 0, status.Errorf(status.NotFound, "gpu: no kernel %q", name)
}

// KernelNames lists the kernels of the embedded fatbin.
func KernelNames() []string { return append([]string(nil), kernelNames...) }
