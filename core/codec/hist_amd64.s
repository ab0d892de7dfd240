//go:build !purego

#include "textflag.h"

// func histWindow(xb *chunkX, h *[256]uint16, ws int, next *byte) (outliers int)
//
// SSE2, sixteen elements per step: their exponent bytes are compared with
// each of the 12 (windowLen) exponents ws..ws+11, and the matches counted
// in byte lanes of X4..X15 (flushed to h every 128 steps, before a lane can
// overflow). Exponents outside the window are added to h one at a time.
// One line of next is prefetched every two steps.
TEXT ·histWindow(SB), NOSPLIT, $48-40
	MOVQ xb+0(FP), SI
	MOVQ h+8(FP), DI
	MOVQ ws+16(FP), R11
	MOVQ next+24(FP), R8
	XORQ R10, R10
	MOVQ $0x0101010101010101, BX
	MOVQ R11, AX
	IMULQ BX, AX
	MOVQ AX, X2
	PUNPCKLQDQ X2, X2
	MOVOU X2, 0(SP) // ws in every byte
	MOVQ $0x0B0B0B0B0B0B0B0B, AX
	MOVQ AX, X2
	PUNPCKLQDQ X2, X2
	MOVOU X2, 16(SP) // 11 in every byte
	PCMPEQB X3, X3   // -1 in every byte
	LEAQ (DI)(R11*2), R11 // &h[ws]
	MOVQ $2, R9

half:
	PXOR X4, X4
	PXOR X5, X5
	PXOR X6, X6
	PXOR X7, X7
	PXOR X8, X8
	PXOR X9, X9
	PXOR X10, X10
	PXOR X11, X11
	PXOR X12, X12
	PXOR X13, X13
	PXOR X14, X14
	PXOR X15, X15
	MOVQ $128, CX

#define COUNT(acc) \
	MOVO    X0, X1; \
	PCMPEQB X2, X1; \
	PSUBB   X1, acc; \
	PSUBB   X3, X2

step:
	TESTQ $1, CX
	JZ    noprefetch
	PREFETCHT0 (R8)
	ADDQ  $64, R8

noprefetch:
	MOVOU (SI), X0
	MOVOU 16(SI), X1
	PSLLW $1, X0 // exponent to the high byte of each element
	PSRLW $8, X0
	PSLLW $1, X1
	PSRLW $8, X1
	PACKUSWB X1, X0 // the sixteen exponents
	MOVOU 0(SP), X2
	COUNT(X4)
	COUNT(X5)
	COUNT(X6)
	COUNT(X7)
	COUNT(X8)
	COUNT(X9)
	COUNT(X10)
	COUNT(X11)
	COUNT(X12)
	COUNT(X13)
	COUNT(X14)
	COUNT(X15)
	// Outside the window iff e - ws (mod 256) > 11.
	MOVOU 0(SP), X2
	MOVO  X0, X1
	PSUBB X2, X1
	MOVOU 16(SP), X2
	PSUBUSB X2, X1
	PXOR  X2, X2
	PCMPEQB X2, X1
	PMOVMSKB X1, AX
	XORL  $0xFFFF, AX
	JNZ   outside

next:
	ADDQ $32, SI
	DECQ CX
	JNZ  step

#define FLUSH(acc, off) \
	PSADBW  X1, acc; \
	MOVQ    acc, AX; \
	PSHUFD  $0x4E, acc, acc; \
	MOVQ    acc, BX; \
	ADDL    BX, AX; \
	ADDW    AX, off(R11)

	PXOR X1, X1
	FLUSH(X4, 0)
	FLUSH(X5, 2)
	FLUSH(X6, 4)
	FLUSH(X7, 6)
	FLUSH(X8, 8)
	FLUSH(X9, 10)
	FLUSH(X10, 12)
	FLUSH(X11, 14)
	FLUSH(X12, 16)
	FLUSH(X13, 18)
	FLUSH(X14, 20)
	FLUSH(X15, 22)
	DECQ R9
	JNZ  half
	MOVQ R10, outliers+32(FP)
	RET

outside:
	// AX: the lanes outside the window.
	MOVOU X0, 32(SP)

outsideLoop:
	BSFL    AX, BX
	MOVBLZX 32(SP)(BX*1), DX
	INCW    (DI)(DX*2)
	INCQ    R10
	LEAL    -1(AX), BX
	ANDL    BX, AX
	JNZ     outsideLoop
	JMP     next
