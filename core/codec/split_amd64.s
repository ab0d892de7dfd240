//go:build !purego

#include "textflag.h"

// func splitChunk(x *chunkX, sm, e *chunkSM)
// Per 16-bit little-endian element v: sm = (v>>8)&0x80 | v&0x7F and
// e = (v>>7)&0xFF, computed in 16-bit lanes and packed to bytes.
TEXT ·splitChunk(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ sm+8(FP), DI
	MOVQ e+16(FP), DX
	MOVQ $0x007F007F007F007F, AX
	MOVQ AX, X13
	PUNPCKLQDQ X13, X13
	MOVQ $0x0080008000800080, AX
	MOVQ AX, X14
	PUNPCKLQDQ X14, X14
	MOVQ $0x00FF00FF00FF00FF, AX
	MOVQ AX, X12
	PUNPCKLQDQ X12, X12
	MOVQ $256, CX // 4096 elements, 16 per step

loop:
	MOVOU (SI), X0   // elements 0..7
	MOVOU 16(SI), X1 // elements 8..15
	MOVO  X0, X2
	PSRLW $8, X2
	PAND  X14, X2
	MOVO  X0, X3
	PAND  X13, X3
	POR   X3, X2
	MOVO  X1, X4
	PSRLW $8, X4
	PAND  X14, X4
	MOVO  X1, X5
	PAND  X13, X5
	POR   X5, X4
	PACKUSWB X4, X2
	MOVOU X2, (DI)
	PSRLW $7, X0
	PAND  X12, X0
	PSRLW $7, X1
	PAND  X12, X1
	PACKUSWB X1, X0
	MOVOU X0, (DX)
	ADDQ  $32, SI
	ADDQ  $16, DI
	ADDQ  $16, DX
	DECQ  CX
	JNZ   loop
	RET
