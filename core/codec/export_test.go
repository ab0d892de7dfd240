package codec

// Exported for the external tests (package codec_test).
var (
	ReportCPU = reportCPU
)

// SetForceGeneric makes the coders use their generic (block at a time)
// paths for bf16 too, and returns a function that restores the setting.
func SetForceGeneric(on bool) (restore func()) {
	old := forceGeneric
	forceGeneric = on
	return func() { forceGeneric = old }
}
