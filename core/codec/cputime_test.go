package codec

import (
	"syscall"
	"testing"
	"time"
)

// cpuTime returns the CPU time (user + system) used so far by the process.
// Benchmarks report throughput per CPU-second next to the wall-clock MB/s,
// because the development machine is shared and busy: wall-clock numbers
// then measure the neighbours as much as the code.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU runs the benchmark loop body fn and reports "cpuMB/s": bytes per
// iteration times iterations, divided by the process CPU time spent.
func reportCPU(b *testing.B, bytes int64, fn func()) {
	b.SetBytes(bytes)
	t0 := cpuTime()
	n := 0
	for b.Loop() {
		fn()
		n++
	}
	if d := cpuTime() - t0; d > 0 {
		b.ReportMetric(float64(bytes)*float64(n)/d.Seconds()/1e6, "cpuMB/s")
	}
}
