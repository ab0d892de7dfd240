# diag_lib.sh — the steps the diagnostic builds share (wgmma_clock.sh, prompt_diag.sh);
# sourced from the repository root. Nothing built here ships.
#   diag_setup NAME PATCH   stop unless kernels/linear.cu and the fatbin are committed, apply
#                           PATCH, and put both (and build/libglyd.so) back when the script exits
#   diag_build DIR FLAGS... compile the kernels for sm_90a with FLAGS into the fatbin, link the
#                           library and copy it to DIR/libglyd.so
NVCC=${NVCC:-$(find .tools/nvcc -path '*nvidia/cu13/bin/nvcc' -type f | head -1)}
export PATH="$(dirname "$NVCC"):$PATH"

diag_restore() { git checkout -q kernels/linear.cu core/gpu/kernels.fatbin; make -s lib >/dev/null; }

diag_setup() {
	git diff --quiet kernels/linear.cu core/gpu/kernels.fatbin ||
		{ echo "$1: commit or stash kernels/linear.cu and the fatbin first" >&2; exit 1; }
	trap diag_restore EXIT
	git apply "$2"
}

diag_build() {
	local dir=$1
	shift
	"$NVCC" -fatbin -O3 -std=c++17 -Xfatbin=-compress-all "$@" -gencode=arch=compute_90a,code=sm_90a \
		-o core/gpu/kernels.fatbin kernels/glyd.cu
	make -s lib >/dev/null
	mkdir -p "$dir" && cp build/libglyd.so "$dir/libglyd.so"
	echo "$dir/libglyd.so"
}
