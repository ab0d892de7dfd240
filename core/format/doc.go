// Package format reads and writes Glyd packed checkpoints: folders that
// transformers can load, holding safetensors shards and a FlatBuffers
// descriptor (glyd.fb).
//
// A packed tensor named N is stored as seven U8 safetensors tensors, one per
// byte plane, under the keys N + ".glyd_" + plane name (see PlaneKey); raw
// tensors (norms, biases, anything not packed) are stored under their own
// name with their own dtype. The descriptor records, per tensor, its layout,
// dtype, shape, groups, planes and the CRC-32C of its original bytes.
// docs/FORMAT.md (part II) specifies every byte.
//
// A Writer streams tensors into a temporary sibling folder and renames it into
// place on Commit, so a crash never leaves a half-written checkpoint under the
// final name. A Reader memory-maps the shards and validates every header,
// byte range, descriptor entry and packed tensor structure before it returns;
// its planes and raw tensors are zero-copy views of the mapping.
package format

//go:generate flatc --go --go-namespace fb -o internal glyd.fbs
