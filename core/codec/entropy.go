package codec

import "math"

// ExponentEntropy returns the order-0 entropy, in bits per element, of the
// exponent field of src (bf16: 8 bits, fp16: 5 bits). The lower limit of any
// layout that stores sign+mantissa raw is this plus 8 (bf16) or 11 (fp16)
// bits per weight. It returns 0 for an empty src or an unknown dtype.
func ExponentEntropy(src []uint16, dt DType) float64 {
	var h [256]uint64
	switch dt {
	case BF16:
		for _, v := range src {
			h[uint8(v>>7)]++
		}
	case FP16:
		for _, v := range src {
			h[v>>10&0x1F]++
		}
	default:
		return 0
	}
	return entropy(&h, uint64(len(src)))
}

func entropy(h *[256]uint64, n uint64) float64 {
	if n == 0 {
		return 0
	}
	var s float64
	for _, c := range h {
		if c > 0 {
			p := float64(c) / float64(n)
			s -= p * math.Log2(p)
		}
	}
	return s
}
