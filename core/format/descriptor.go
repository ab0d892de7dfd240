package format

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	flatbuffers "github.com/google/flatbuffers/go"

	"github.com/glyd/glyd/core/codec"
	"github.com/glyd/glyd/core/format/internal/fb"
	"github.com/glyd/glyd/core/status"
)

// descriptor is the decoded content of glyd.fb.
type descriptor struct {
	format  string // "glyd-v1", "glyd-v2"
	version int    // 1, 2
	library string
	shards  []descShard
	tensors []descTensor // sorted by name
}

type descShard struct {
	name string
	size uint64
}

type descTensor struct {
	name     string
	layout   codec.Layout
	dtype    dtypeInfo
	shape    []int64
	elements uint64
	checksum uint32
	order    uint8
	shard    uint32
	planes   []descPlane // packed: codec.NumPlanes; raw: 1
	groups   []codec.Group
}

type descPlane struct {
	key    string
	length uint64
}

// Vtable slots of the schema's fields (glyd.fbs, in declaration order).
const (
	slotCheckpointFormat, slotCheckpointVersion, slotCheckpointLibrary, slotCheckpointShards, slotCheckpointTensors = 0, 1, 2, 3, 4
	slotShardName, slotShardSize                                                                                    = 0, 1
	slotPlaneKey, slotPlaneLength                                                                                   = 0, 1
	slotGroupElements, slotGroupBase, slotGroupTable, slotGroupOffsets, slotGroupEscapes                            = 0, 1, 2, 3, 4
	slotTensorName, slotTensorLayout, slotTensorDType, slotTensorShape, slotTensorChecksum                          = 0, 1, 2, 3, 4
	slotTensorOrder, slotTensorShard, slotTensorPlanes, slotTensorGroups                                            = 5, 6, 7, 8
)

// Fewest bytes a valid Shard, Tensor, Plane and Group take beyond its offset
// in a vector (its table, strings and vectors): the buffer must hold that
// much for every element of a vector of tables before we allocate for them.
const minShard, minTensor, minPlane, minGroup = 14, 40, 14, 78

// descriptorIdentifier is the FlatBuffers file identifier of glyd.fb.
const descriptorIdentifier = fb.CheckpointIdentifier

// parseFormatName returns N for "glyd-vN" (N a positive decimal without
// leading zeros).
func parseFormatName(s string) (int, bool) {
	d, ok := strings.CutPrefix(s, "glyd-v")
	if !ok || d == "" || d[0] == '0' || len(d) > 9 {
		return 0, false
	}
	n, err := strconv.Atoi(d)
	if err != nil || strconv.Itoa(n) != d {
		return 0, false
	}
	return n, true
}

// decodeDescriptor verifies and decodes glyd.fb. file is used in messages.
// Formats newer than maxVersion give status.Version; anything malformed or
// inconsistent gives status.Descriptor (status.Overflow for a shape whose
// product overflows). It never panics.
func decodeDescriptor(file string, buf []byte, maxVersion int) (d *descriptor, err error) {
	defer func() {
		if p := recover(); p != nil {
			d, err = nil, status.Errorf(status.Descriptor, "invalid input: %s: malformed descriptor (%v)", file, p)
		}
	}()
	return decodeDescriptorNoRecover(file, buf, maxVersion)
}

// decodeDescriptorNoRecover is decodeDescriptor without the safety net, so
// that fuzzing finds any access the verification misses.
func decodeDescriptorNoRecover(file string, buf []byte, maxVersion int) (*descriptor, error) {
	d, err := decodeChecked(buf, maxVersion)
	if err != nil {
		if status.CodeOf(err) == status.Version {
			return nil, status.Errorf(status.Version, "%s: %v", file, err)
		}
		return nil, corrupt(file, err)
	}
	return d, nil
}

func decodeChecked(buf []byte, maxVersion int) (*descriptor, error) {
	if len(buf) < 8 {
		return nil, fbErr("descriptor is %d bytes, too short to be a FlatBuffer", len(buf))
	}
	if id := string(buf[4:8]); id != descriptorIdentifier {
		return nil, fbErr("file identifier is %q, want %q: not a Glyd descriptor", id, descriptorIdentifier)
	}
	if len(buf) > MaxDescriptorSize {
		return nil, fbErr("descriptor is %d bytes, more than the limit of %d", len(buf), MaxDescriptorSize)
	}
	r := &fbReader{b: buf, budget: uint64(len(buf))}
	rootPos, _, err := r.follow(0)
	if err != nil {
		return nil, err
	}
	root, err := r.table(rootPos)
	if err != nil {
		return nil, err
	}

	// The format first: a newer format may change everything after it.
	d := &descriptor{}
	var ok bool
	if d.format, ok, err = r.str(root, slotCheckpointFormat); err != nil {
		return nil, err
	} else if !ok {
		return nil, fbErr("descriptor has no format name")
	}
	ver, err := r.scalar(root, slotCheckpointVersion, 4)
	if err != nil {
		return nil, err
	}
	fv, ok := parseFormatName(d.format)
	if !ok {
		return nil, fbErr("unknown format %q (want glyd-v1 or glyd-v2)", d.format)
	}
	if newest := max(uint64(fv), ver); newest > uint64(maxVersion) {
		name := d.format
		if ver > uint64(fv) {
			name = fmt.Sprintf("%s (format version %d)", d.format, ver)
		}
		if maxVersion == FormatVersion {
			return nil, status.Errorf(status.Version, "checkpoint format %s is newer than this library reads (%s); upgrade Glyd", name, FormatName(maxVersion))
		}
		return nil, status.Errorf(status.Version, "checkpoint format %s is newer than this reader accepts (%s, its MaxFormatVersion)", name, FormatName(maxVersion))
	}
	if uint64(fv) != ver {
		return nil, fbErr("format %q disagrees with format_version %d", d.format, ver)
	}
	d.version = fv
	if d.library, _, err = r.str(root, slotCheckpointLibrary); err != nil {
		return nil, err
	}

	start, n, err := r.tableVector(root, slotCheckpointShards, minShard)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fbErr("descriptor lists no shards")
	}
	seen := map[string]bool{}
	for i := uint64(0); i < n; i++ {
		st, err := r.tableAt(start, i)
		if err != nil {
			return nil, err
		}
		var s descShard
		if s.name, ok, err = r.str(st, slotShardName); err != nil {
			return nil, err
		} else if !ok || !validFileName(s.name) || !strings.HasSuffix(s.name, ".safetensors") {
			return nil, fbErr("shard %d has a bad file name %q", i, s.name)
		}
		if seen[s.name] {
			return nil, fbErr("shard %q is listed twice", s.name)
		}
		seen[s.name] = true
		if s.size, err = r.scalar(st, slotShardSize, 8); err != nil {
			return nil, err
		}
		d.shards = append(d.shards, s)
	}

	if start, n, err = r.tableVector(root, slotCheckpointTensors, minTensor); err != nil {
		return nil, err
	}
	d.tensors = make([]descTensor, n)
	for i := range d.tensors {
		t := &d.tensors[i]
		tt, err := r.tableAt(start, uint64(i))
		if err == nil {
			err = decodeTensor(r, tt, t, d)
		}
		if err != nil {
			if t.name != "" {
				return nil, status.Errorf(status.CodeOf(err), "tensor %q: %v", t.name, err)
			}
			return nil, status.Errorf(status.CodeOf(err), "tensor %d: %v", i, err)
		}
		if i > 0 && t.name <= d.tensors[i-1].name {
			return nil, fbErr("tensor %q follows %q: tensors must be sorted by name and unique", t.name, d.tensors[i-1].name)
		}
	}
	return d, nil
}

func decodeTensor(r *fbReader, tt fbTable, t *descTensor, d *descriptor) error {
	var ok bool
	var err error
	if t.name, ok, err = r.str(tt, slotTensorName); err != nil {
		return err
	} else if !ok {
		return fbErr("no name")
	}
	if err := checkName(t.name); err != nil {
		t.name = ""
		return fbErr("%v", err)
	}
	var v [4]uint64
	for i, f := range []struct {
		slot int
		size uint64
	}{{slotTensorLayout, 1}, {slotTensorDType, 1}, {slotTensorChecksum, 4}, {slotTensorOrder, 1}} {
		if v[i], err = r.scalar(tt, f.slot, f.size); err != nil {
			return err
		}
	}
	t.layout, t.checksum, t.order = codec.Layout(v[0]), uint32(v[2]), uint8(v[3])
	if t.order != 0 {
		return fbErr("unknown element order %d (only row-major, 0, exists)", t.order)
	}
	shard, err := r.scalar(tt, slotTensorShard, 4)
	if err != nil {
		return err
	}
	if shard >= uint64(len(d.shards)) {
		return fbErr("shard index %d out of range (%d shards)", shard, len(d.shards))
	}
	t.shard = uint32(shard)

	start, n, err := r.vector(tt, slotTensorShape, 8)
	if err != nil {
		return err
	}
	if n > MaxDims {
		return fbErr("%d dimensions, more than %d", n, MaxDims)
	}
	t.shape = make([]int64, n)
	for i := range t.shape {
		t.shape[i] = int64(binary.LittleEndian.Uint64(r.b[start+8*uint64(i):]))
		if t.shape[i] < 0 {
			return fbErr("negative dimension in shape %v", t.shape)
		}
	}
	if t.elements, ok = numElements(t.shape); !ok {
		return status.Errorf(status.Overflow, "the product of shape %v overflows", t.shape)
	}

	start, n, err = r.tableVector(tt, slotTensorPlanes, minPlane)
	if err != nil {
		return err
	}
	if n > codec.NumPlanes {
		return fbErr("%d planes, more than %d", n, codec.NumPlanes)
	}
	t.planes = make([]descPlane, n)
	for i := range t.planes {
		p := &t.planes[i]
		pt, err := r.tableAt(start, uint64(i))
		if err != nil {
			return err
		}
		if p.key, ok, err = r.str(pt, slotPlaneKey); err != nil {
			return err
		} else if !ok {
			return fbErr("plane %d has no key", i)
		}
		if p.length, err = r.scalar(pt, slotPlaneLength, 8); err != nil {
			return err
		}
	}
	if start, n, err = r.tableVector(tt, slotTensorGroups, minGroup); err != nil {
		return err
	}
	t.groups = make([]codec.Group, n)
	for i := range t.groups {
		gt, err := r.tableAt(start, uint64(i))
		if err == nil {
			err = decodeGroup(r, gt, &t.groups[i])
		}
		if err != nil {
			return fbErr("group %d: %v", i, err)
		}
	}

	dt, ok := dtypeByCode(uint8(v[1]))
	if !ok {
		return fbErr("unknown dtype %d", v[1])
	}
	t.dtype = dt
	switch t.layout {
	case codec.Raw:
		size, ok := byteSize(t.elements, dt.size)
		switch {
		case !ok:
			return status.Errorf(status.Overflow, "%s %v overflows a byte count", dt.name, t.shape)
		case len(t.planes) != 1 || t.planes[0].key != t.name:
			return fbErr("a raw tensor needs exactly one stored tensor, under its own name")
		case t.planes[0].length != size:
			return fbErr("%s %v is %d bytes, the descriptor says %d", dt.name, t.shape, size, t.planes[0].length)
		case len(t.groups) != 0:
			return fbErr("a raw tensor has no groups, this one has %d", len(t.groups))
		}
	case codec.Fixed12, codec.Smallest:
		if _, ok := packedDType(codec.DType(dt.code)); !ok {
			return fbErr("a packed tensor must be BF16 or F16, not %s", dt.name)
		}
		if len(t.planes) != codec.NumPlanes {
			return fbErr("a packed tensor needs %d planes, this one has %d", codec.NumPlanes, len(t.planes))
		}
		for p := range t.planes {
			if want := PlaneKey(t.name, codec.Plane(p)); t.planes[p].key != want {
				return fbErr("plane %d has key %q, want %q", p, t.planes[p].key, want)
			}
		}
		if len(t.groups) == 0 {
			return fbErr("a packed tensor needs at least one group")
		}
		if d.version < FormatV2 && len(t.groups) > 1 {
			return fbErr("%d groups in a %s checkpoint (several groups need glyd-v2)", len(t.groups), d.format)
		}
	default:
		return fbErr("unknown layout %d", t.layout)
	}
	return nil
}

func decodeGroup(r *fbReader, gt fbTable, g *codec.Group) error {
	var err error
	if g.Elements, err = r.scalar(gt, slotGroupElements, 8); err != nil {
		return err
	}
	base, err := r.scalar(gt, slotGroupBase, 1)
	if err != nil {
		return err
	}
	g.Base = uint8(base)
	if g.Escapes, err = r.scalar(gt, slotGroupEscapes, 8); err != nil {
		return err
	}
	start, n, err := r.vector(gt, slotGroupTable, 1)
	if err != nil {
		return err
	}
	if n != uint64(len(g.Table)) {
		return fbErr("exponent table has %d entries, want %d", n, len(g.Table))
	}
	copy(g.Table[:], r.b[start:start+n])
	if start, n, err = r.vector(gt, slotGroupOffsets, 8); err != nil {
		return err
	}
	if n != codec.NumPlanes {
		return fbErr("%d plane offsets, want %d", n, codec.NumPlanes)
	}
	for p := range g.Offsets {
		g.Offsets[p] = binary.LittleEndian.Uint64(r.b[start+8*uint64(p):])
	}
	return nil
}

// encodeDescriptor serializes d (its tensors already sorted by name).
func encodeDescriptor(d *descriptor) (out []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, status.Errorf(status.Internal, "building the descriptor: %v", p)
		}
	}()
	b := flatbuffers.NewBuilder(4096)
	offsets := func(n int, start func(*flatbuffers.Builder, int) flatbuffers.UOffsetT, offs []flatbuffers.UOffsetT) flatbuffers.UOffsetT {
		start(b, n)
		for i := n - 1; i >= 0; i-- {
			b.PrependUOffsetT(offs[i])
		}
		return b.EndVector(n)
	}

	tensors := make([]flatbuffers.UOffsetT, len(d.tensors))
	for i := range d.tensors {
		t := &d.tensors[i]
		name := b.CreateString(t.name)
		planes := make([]flatbuffers.UOffsetT, len(t.planes))
		for j, p := range t.planes {
			key := b.CreateString(p.key)
			fb.PlaneStart(b)
			fb.PlaneAddKey(b, key)
			fb.PlaneAddLength(b, p.length)
			planes[j] = fb.PlaneEnd(b)
		}
		planeVec := offsets(len(planes), fb.TensorStartPlanesVector, planes)
		var groupVec flatbuffers.UOffsetT
		if len(t.groups) > 0 {
			groups := make([]flatbuffers.UOffsetT, len(t.groups))
			for j, g := range t.groups {
				fb.GroupStartExpTableVector(b, len(g.Table))
				for k := len(g.Table) - 1; k >= 0; k-- {
					b.PrependByte(g.Table[k])
				}
				table := b.EndVector(len(g.Table))
				fb.GroupStartOffsetsVector(b, len(g.Offsets))
				for k := len(g.Offsets) - 1; k >= 0; k-- {
					b.PrependUint64(g.Offsets[k])
				}
				offs := b.EndVector(len(g.Offsets))
				fb.GroupStart(b)
				fb.GroupAddElements(b, g.Elements)
				fb.GroupAddBase(b, g.Base)
				fb.GroupAddExpTable(b, table)
				fb.GroupAddOffsets(b, offs)
				fb.GroupAddEscapes(b, g.Escapes)
				groups[j] = fb.GroupEnd(b)
			}
			groupVec = offsets(len(groups), fb.TensorStartGroupsVector, groups)
		}
		fb.TensorStartShapeVector(b, len(t.shape))
		for k := len(t.shape) - 1; k >= 0; k-- {
			b.PrependInt64(t.shape[k])
		}
		shape := b.EndVector(len(t.shape))

		fb.TensorStart(b)
		fb.TensorAddName(b, name)
		fb.TensorAddLayout(b, fb.Layout(t.layout))
		fb.TensorAddDtype(b, fb.DType(t.dtype.code))
		fb.TensorAddShape(b, shape)
		fb.TensorAddChecksum(b, t.checksum)
		fb.TensorAddOrder(b, fb.Order(t.order))
		fb.TensorAddShard(b, t.shard)
		fb.TensorAddPlanes(b, planeVec)
		if groupVec != 0 {
			fb.TensorAddGroups(b, groupVec)
		}
		tensors[i] = fb.TensorEnd(b)
	}
	tensorVec := offsets(len(tensors), fb.CheckpointStartTensorsVector, tensors)

	shards := make([]flatbuffers.UOffsetT, len(d.shards))
	for i, s := range d.shards {
		name := b.CreateString(s.name)
		fb.ShardStart(b)
		fb.ShardAddName(b, name)
		fb.ShardAddSize(b, s.size)
		shards[i] = fb.ShardEnd(b)
	}
	shardVec := offsets(len(shards), fb.CheckpointStartShardsVector, shards)

	format := b.CreateString(d.format)
	library := b.CreateString(d.library)
	fb.CheckpointStart(b)
	fb.CheckpointAddFormat(b, format)
	fb.CheckpointAddFormatVersion(b, uint32(d.version))
	fb.CheckpointAddLibraryVersion(b, library)
	fb.CheckpointAddShards(b, shardVec)
	fb.CheckpointAddTensors(b, tensorVec)
	fb.FinishCheckpointBuffer(b, fb.CheckpointEnd(b))
	return b.FinishedBytes(), nil
}
