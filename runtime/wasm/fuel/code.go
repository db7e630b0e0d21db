package fuel

import "fmt"

// funcBody is one function body as readCode located it.
type funcBody struct {
	decls     int    // number of local declarations
	declBytes []byte // the declarations, after their count
	locals    uint32 // parameters plus declared locals
	expr      []byte // the instructions, final end included
	exprOff   int    // absolute offset of expr[0]
}

// readCode checks the code section's framing and every body's locals (the
// runtime allocates from the local counts) without walking instructions.
func readCode(s section, info *moduleInfo) ([]funcBody, error) {
	r := newReader(s.payload, s.offset)
	off := r.offset()
	n, err := r.count(3, "function body")
	if err != nil {
		return nil, err
	}
	if n != len(info.funcTypes) {
		return nil, malformedAt(off, "code section has %d bodies but the function section declares %d", n, len(info.funcTypes))
	}
	bodies := make([]funcBody, n)
	for i := range bodies {
		sizeOff := r.offset()
		size, err := r.count(1, "body size")
		if err != nil {
			return nil, err
		}
		if size > MaxBodySize {
			return nil, fmt.Errorf("fuel: %w at offset %d: function %d body is %d bytes, limit %d", ErrLimit, sizeOff, i, size, MaxBodySize)
		}
		bodyOff := r.offset()
		raw, _ := r.bytes(size) // count checked size
		if err := readLocals(newReader(raw, bodyOff), info.paramCounts[info.funcTypes[i]], &bodies[i]); err != nil {
			return nil, err
		}
	}
	if err := trailing(r, "code"); err != nil {
		return nil, err
	}
	return bodies, nil
}

// readLocals reads a body's local declarations into b and locates its
// instructions.
func readLocals(r *reader, params uint32, b *funcBody) error {
	decls, err := r.count(2, "local declaration")
	if err != nil {
		return err
	}
	start := r.pos
	locals := uint64(params)
	for range decls {
		off := r.offset()
		n, err := r.u32()
		if err != nil {
			return err
		}
		if err := readValType(r); err != nil {
			return err
		}
		locals += uint64(n)
		if locals-uint64(params) > MaxLocals {
			return fmt.Errorf("fuel: %w at offset %d: more than %d locals in one function", ErrLimit, off, MaxLocals)
		}
	}
	*b = funcBody{
		decls:     decls,
		declBytes: r.buf[start:r.pos],
		locals:    uint32(locals),
		expr:      r.buf[r.pos:],
		exprOff:   r.offset(),
	}
	return nil
}

// instrumentCode returns the new code section: every body gets one i64
// scratch local (plus an i32 one when it has bulk operations) and the
// charges described in DESIGN.md.
func instrumentCode(bodies []funcBody, fuelGlobal uint32) ([]byte, error) {
	size := 8
	for _, b := range bodies {
		size += len(b.expr) + len(b.declBytes) + 16
	}
	out := make([]byte, 0, size+size/2)
	out = appendU32(out, uint32(len(bodies)))
	var w walker
	var buf []byte
	for _, b := range bodies {
		if err := w.walk(newReader(b.expr, b.exprOff)); err != nil {
			return nil, err
		}
		scratch64 := b.locals
		scratch32 := scratch64 + 1
		decls := uint32(b.decls) + 1
		if w.needsScratch32 {
			decls++
		}
		buf = appendU32(buf[:0], decls)
		buf = append(buf, b.declBytes...)
		buf = append(buf, 0x01, 0x7e) // one i64 scratch local
		if w.needsScratch32 {
			buf = append(buf, 0x01, 0x7f) // one i32 scratch local
		}
		buf = w.emit(buf, b.expr, fuelGlobal, scratch64, scratch32)
		out = appendU32(out, uint32(len(buf)))
		out = append(out, buf...)
	}
	return out, nil
}
