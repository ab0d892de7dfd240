package gpu

/*
#include "driver.h"
*/
import "C"

import "github.com/glyd/glyd/core/status"

// Limits of MoeRoute: its one block keeps a bin per pair (uint16), a start
// per bin and at least one warp's counts per bin in shared memory, within
// 96 KiB (every sm_80+ GPU grants 99 KiB or more with the opt-in).
const (
	MoeRouteMaxPairs  = 16384
	MoeRouteMaxExpert = 4000 // total experts (routed + identity)
)

// MoeRoute sorts the (token, slot) pairs of a routing by expert on the
// caller's stream, without the host (kernels/moe.cu, glyd_moe_route):
//
//	ids     int64 [pairs] expert of pair token*topk+slot: [0, experts) routed,
//	        [experts, total) identity experts, anything else dropped
//	offs    int32 [experts] cumulative end row of each routed expert
//	tok     int32 [pairs] token of each sorted row (stable by expert; identity
//	        experts after the routed ones, dropped pairs last)
//	rowof   int32 [pairs] sorted row of each pair
func MoeRoute(dev int, stream, ids uintptr, pairs, topk, experts, total int64, offs, tok, rowof uintptr) error {
	switch {
	case pairs < 0 || topk < 1 || experts < 1 || total < experts:
		return status.Errorf(status.InvalidArgument, "gpu: moe route: pairs %d, topk %d, experts %d, total %d out of range", pairs, topk, experts, total)
	case pairs > MoeRouteMaxPairs || total > MoeRouteMaxExpert:
		return status.Errorf(status.Unsupported, "gpu: moe route handles at most %d pairs and %d experts, have %d and %d", MoeRouteMaxPairs, MoeRouteMaxExpert, pairs, total)
	case pairs%topk != 0:
		return status.Errorf(status.InvalidArgument, "gpu: moe route: %d pairs is not a multiple of topk %d", pairs, topk)
	case ids == 0 && pairs > 0 || offs == 0 || tok == 0 && pairs > 0 || rowof == 0 && pairs > 0:
		return status.Errorf(status.InvalidArgument, "gpu: moe route: nil buffer")
	}
	d, err := load(dev)
	if err != nil {
		return err
	}
	var p C.glyd_kparams
	p.ids, p.offs, p.tok, p.rowof = C.glyd_u64(ids), C.glyd_u64(offs), C.glyd_u64(tok), C.glyd_u64(rowof)
	p.rows, p.topk, p.num_experts, p.experts_total = C.glyd_i64(pairs), C.glyd_i64(topk), C.glyd_i64(experts), C.glyd_i64(total)
	nb := total + 1 // bins
	w := routeWarps(pairs, nb)
	smem := (nb+1)*4 + w*nb*4 + (pairs*2+15)&^15
	return launchAs(dev, kMoeRoute, 1, 1, 1, uint32(32*w), uint32(smem), stream, &p, d.programmatic())
}

// routeWarps is how many warps of glyd_moe_route count and place the pairs,
// the warps of its block (kernels/moe.cu, route_warps): up to 32 while their
// counts per bin fit in 96 KiB of shared memory with the bin starts and the
// pairs' bins, and one per 32 pairs at most.
func routeWarps(pairs, bins int64) int64 {
	room := 96*1024 - (bins+1)*4 - (pairs*2+15)&^15
	return max(1, min(32, room/(bins*4), (pairs+31)/32))
}

// MoeCombine writes out[t] = sum over slots s in order of rw[t*topk+s] * v
// (fp32, then bf16) on the caller's stream, v = d[rowof[pair]] for a routed
// expert, x[t] for an identity expert, nothing for a dropped pair (ids as in
// MoeRoute): x, out bf16 [tokens, hidden]; d bf16 [pairs, hidden] in sorted
// rows; rw fp32 [pairs]. x, d and out must be 16-byte aligned.
func MoeCombine(dev int, stream, x, d, rw, ids, rowof uintptr, tokens, topk, hidden, experts, total int64, out uintptr) error {
	switch {
	case tokens < 0 || topk < 1 || hidden < 1 || experts < 1 || total < experts:
		return status.Errorf(status.InvalidArgument, "gpu: moe combine: tokens %d, topk %d, hidden %d, experts %d, total %d out of range", tokens, topk, hidden, experts, total)
	case tokens > 65535:
		return status.Errorf(status.Unsupported, "gpu: moe combine: %d tokens is too many for one launch", tokens)
	case tokens == 0:
		return nil
	case x == 0 || d == 0 || rw == 0 || ids == 0 || rowof == 0 || out == 0:
		return status.Errorf(status.InvalidArgument, "gpu: moe combine: nil buffer")
	case x%16 != 0 || d%16 != 0 || out%16 != 0:
		return status.Errorf(status.InvalidArgument, "gpu: moe combine: x, d and out must be 16-byte aligned")
	}
	gd, err := load(dev)
	if err != nil {
		return err
	}
	var p C.glyd_kparams
	p.x, p.dst, p.rw, p.ids, p.rowof, p.y = C.glyd_u64(x), C.glyd_u64(d), C.glyd_u64(rw), C.glyd_u64(ids), C.glyd_u64(rowof), C.glyd_u64(out)
	p.rows, p.topk, p.N, p.num_experts, p.experts_total = C.glyd_i64(tokens), C.glyd_i64(topk), C.glyd_i64(hidden), C.glyd_i64(experts), C.glyd_i64(total)
	return launchAs(dev, kMoeCombine, gridFor(uint64(hidden), 2048, 1<<31-1), uint32(tokens), 1, 256, 0, stream, &p, gd.programmatic())
}

// MoeSiluMul writes out[r][j] = bf16(bf16(silu(g)) * u) for g = x[r][j], u =
// x[r][inter+j] on the caller's stream: x bf16 [rows, 2*inter] (gate, then
// up), out bf16 [rows, inter], both 16-byte aligned; silu(v) = v / (1 +
// exp(-v)) in fp32. The bits of torch's silu(gate) * up in bf16.
func MoeSiluMul(dev int, stream, x uintptr, rows, inter int64, out uintptr) error {
	switch {
	case rows < 0 || inter < 1:
		return status.Errorf(status.InvalidArgument, "gpu: moe silu_mul: rows %d, inter %d out of range", rows, inter)
	case rows == 0:
		return nil
	case x == 0 || out == 0:
		return status.Errorf(status.InvalidArgument, "gpu: moe silu_mul: nil buffer")
	case x%16 != 0 || out%16 != 0:
		return status.Errorf(status.InvalidArgument, "gpu: moe silu_mul: x and out must be 16-byte aligned")
	}
	d, err := load(dev)
	if err != nil {
		return err
	}
	var p C.glyd_kparams
	p.x, p.y = C.glyd_u64(x), C.glyd_u64(out)
	p.rows, p.N = C.glyd_i64(rows), C.glyd_i64(inter)
	items := uint64(rows) * uint64((inter+7)/8) // 8 features each; the kernel strides over any more
	return launchAs(dev, kMoeSiluMul, gridFor(items, 256, 1<<31-1), 1, 1, 256, 0, stream, &p, d.programmatic())
}

// MoeRowExperts writes the routing ids of an expert-major input on the
// caller's stream (Llama 4: x bf16 [rows, hidden] holds each token once per
// expert, perExpert rows per expert, scaled by its router score): ids int64
// [rows], ids[r] = r / perExpert where row r has an element that is not ±0,
// else -1. x must be 16-byte aligned.
func MoeRowExperts(dev int, stream, x uintptr, rows, hidden, perExpert int64, ids uintptr) error {
	switch {
	case rows < 0 || hidden < 1 || perExpert < 1:
		return status.Errorf(status.InvalidArgument, "gpu: moe row experts: rows %d, hidden %d, rows per expert %d out of range", rows, hidden, perExpert)
	case rows == 0:
		return nil
	case x == 0 || ids == 0:
		return status.Errorf(status.InvalidArgument, "gpu: moe row experts: nil buffer")
	case x%16 != 0:
		return status.Errorf(status.InvalidArgument, "gpu: moe row experts: x must be 16-byte aligned")
	case (rows+7)/8 > 1<<31-1:
		return status.Errorf(status.Unsupported, "gpu: moe row experts: %d rows is too many for one launch", rows)
	}
	d, err := load(dev)
	if err != nil {
		return err
	}
	var p C.glyd_kparams
	p.x, p.ids = C.glyd_u64(x), C.glyd_u64(ids)
	p.rows, p.K, p.topk = C.glyd_i64(rows), C.glyd_i64(hidden), C.glyd_i64(perExpert)
	return launchAs(dev, kMoeRowExperts, uint32((rows+7)/8), 1, 1, 256, 0, stream, &p, d.programmatic())
}

// MoeTop1 writes the top-1 routing of router logits on the caller's stream
// (Llama 4): logits bf16 [tokens, experts]; ids int64 [tokens], the expert of
// the largest logit in torch.topk's order (NaN above every number, -0 below
// +0, the lowest expert between equals), MoeRoute's ids with topk 1; score
// bf16 [tokens], bf16(1 / (1 + exp(-logit))) in fp32 of that logit (torch's
// sigmoid of the logit as fp32).
func MoeTop1(dev int, stream, logits uintptr, tokens, experts int64, ids, score uintptr) error {
	switch {
	case tokens < 0 || experts < 1 || experts > 1<<31-1:
		return status.Errorf(status.InvalidArgument, "gpu: moe top1: tokens %d, experts %d out of range", tokens, experts)
	case tokens == 0:
		return nil
	case logits == 0 || ids == 0 || score == 0:
		return status.Errorf(status.InvalidArgument, "gpu: moe top1: nil buffer")
	case (tokens+7)/8 > 1<<31-1:
		return status.Errorf(status.Unsupported, "gpu: moe top1: %d tokens is too many for one launch", tokens)
	}
	d, err := load(dev)
	if err != nil {
		return err
	}
	var p C.glyd_kparams
	p.x, p.ids, p.y = C.glyd_u64(logits), C.glyd_u64(ids), C.glyd_u64(score)
	p.rows, p.num_experts = C.glyd_i64(tokens), C.glyd_i64(experts)
	return launchAs(dev, kMoeTop1, uint32((tokens+7)/8), 1, 1, 256, 0, stream, &p, d.programmatic())
}

// MoeGatherScale writes out[r] = bf16(x[tok[r]] * score[tok[r]]) (an fp32
// product rounded to bf16: torch's bf16 product) for r < rows on the caller's
// stream: x bf16 [*, hidden], tok int32 [rows] (MoeRoute's tokens), score bf16
// [*], out bf16 [rows, hidden]; x and out 16-byte aligned. The experts' input
// rows of Llama 4, which scales a token by its score before its expert.
func MoeGatherScale(dev int, stream, x, tok, score uintptr, rows, hidden int64, out uintptr) error {
	switch {
	case rows < 0 || hidden < 1:
		return status.Errorf(status.InvalidArgument, "gpu: moe gather_scale: rows %d, hidden %d out of range", rows, hidden)
	case rows == 0:
		return nil
	case x == 0 || tok == 0 || score == 0 || out == 0:
		return status.Errorf(status.InvalidArgument, "gpu: moe gather_scale: nil buffer")
	case x%16 != 0 || out%16 != 0:
		return status.Errorf(status.InvalidArgument, "gpu: moe gather_scale: x and out must be 16-byte aligned")
	}
	d, err := load(dev)
	if err != nil {
		return err
	}
	var p C.glyd_kparams
	p.x, p.tok, p.dst, p.y = C.glyd_u64(x), C.glyd_u64(tok), C.glyd_u64(score), C.glyd_u64(out)
	p.rows, p.N = C.glyd_i64(rows), C.glyd_i64(hidden)
	items := uint64(rows) * uint64((hidden+7)/8) // 8 features each; the kernel strides over any more
	return launchAs(dev, kMoeGatherScale, gridFor(items, 256, 1<<31-1), 1, 1, 256, 0, stream, &p, d.programmatic())
}
