//go:build !purego

#include "textflag.h"

// func prefetch(p *byte, n int)
// PREFETCHT0 (SSE, part of every amd64 CPU) of every 64-byte line that
// [p, p+n) touches; n > 0.
TEXT ·prefetch(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	ADDQ SI, CX

loop:
	PREFETCHT0 (SI)
	ADDQ $64, SI
	CMPQ SI, CX
	JB   loop
	RET
