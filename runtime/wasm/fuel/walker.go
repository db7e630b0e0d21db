package fuel

import "fmt"

// Control frame kinds.
const (
	frameFunc byte = iota
	frameBlock
	frameLoop
	frameIf
	frameElse
)

type frame struct {
	kind     byte
	targeted bool // some branch exits to this block's end
}

// region is a straight-line run of code with a single entry. Its whole
// cost is charged at its entry, at expression offset at. A dead region
// (after br, br_table, return or unreachable, until the next point a branch
// can reach) is never executed and gets no charge.
type region struct {
	at   int
	cost int64
	live bool
}

// walker decodes one function's instructions and records where charges go.
// It is reused across bodies to keep allocations flat.
type walker struct {
	stack          []frame
	regions        []region
	bulk           []int // expression offsets of bulk operations in live code
	needsScratch32 bool
}

// open starts a new region at expression offset at.
func (w *walker) open(at int, live bool) {
	w.regions = append(w.regions, region{at: at, live: live})
}

func (w *walker) cur() *region { return &w.regions[len(w.regions)-1] }

// target marks the block that a branch with label depth l exits.
func (w *walker) target(r *reader, off int) error {
	l, err := r.u32()
	if err != nil {
		return err
	}
	if uint64(l) >= uint64(len(w.stack)) {
		return malformedAt(off, "branch depth %d out of range (%d enclosing blocks)", l, len(w.stack))
	}
	w.stack[len(w.stack)-1-int(l)].targeted = true
	return nil
}

// walk decodes the expression in r, filling w.regions and w.bulk.
func (w *walker) walk(r *reader) error {
	w.stack = append(w.stack[:0], frame{kind: frameFunc})
	w.regions = w.regions[:0]
	w.bulk = w.bulk[:0]
	w.needsScratch32 = false
	w.open(0, true)
	for len(w.stack) > 0 {
		off := r.offset()
		op, err := r.byte()
		if err != nil {
			return malformedAt(off, "function body ends before its final end")
		}
		cost := int64(1)
		switch op {
		case 0x00, 0x0f: // unreachable, return
			w.cur().cost++
			w.open(r.pos, false)
			continue
		case 0x01: // nop
			cost = 0
		case 0x02, 0x03, 0x04: // block, loop, if
			if err := readBlockType(r); err != nil {
				return err
			}
			if len(w.stack) >= MaxNesting {
				return fmt.Errorf("fuel: %w at offset %d: blocks nested deeper than %d", ErrLimit, off, MaxNesting)
			}
			switch op {
			case 0x02:
				w.stack = append(w.stack, frame{kind: frameBlock})
			case 0x03:
				w.stack = append(w.stack, frame{kind: frameLoop})
				w.open(r.pos, true) // loop header: every iteration pays
			case 0x04:
				w.stack = append(w.stack, frame{kind: frameIf})
				w.cur().cost++
				w.open(r.pos, true) // then arm
			}
			continue
		case 0x05: // else
			top := &w.stack[len(w.stack)-1]
			if top.kind != frameIf {
				return malformedAt(off, "else without a matching if")
			}
			top.kind = frameElse
			w.open(r.pos, true)
			continue
		case 0x0b: // end
			top := w.stack[len(w.stack)-1]
			w.stack = w.stack[:len(w.stack)-1]
			switch {
			case len(w.stack) == 0:
				if r.remaining() != 0 {
					return malformedAt(r.offset(), "%d bytes after the function's final end", r.remaining())
				}
			case top.kind == frameIf || top.kind == frameElse || (top.kind == frameBlock && top.targeted):
				w.open(r.pos, true) // a join point: branches and fall-through meet
			}
			// After a loop or an untargeted block the only way in is falling
			// through, so the current region simply continues.
			continue
		case 0x0c: // br
			if err := w.target(r, off); err != nil {
				return err
			}
			w.cur().cost++
			w.open(r.pos, false)
			continue
		case 0x0d: // br_if: the fall-through stays in this region
			if err := w.target(r, off); err != nil {
				return err
			}
		case 0x0e: // br_table
			n, err := r.count(1, "br_table label")
			if err != nil {
				return err
			}
			for range n + 1 {
				if err := w.target(r, off); err != nil {
					return err
				}
			}
			w.cur().cost++
			w.open(r.pos, false)
			continue
		default:
			bulk, err := skipImmediates(r, op, off)
			if err != nil {
				return err
			}
			if bulk && w.cur().live {
				w.bulk = append(w.bulk, off-r.base)
				w.needsScratch32 = true
			}
		}
		w.cur().cost += cost
	}
	return nil
}

// readBlockType reads a block type: 0x40 (empty), a value type, or a
// non-negative s33 type index (multi-value).
func readBlockType(r *reader) error {
	if r.remaining() > 0 {
		b := r.buf[r.pos]
		if b == 0x40 || isValType(b) {
			r.pos++
			return nil
		}
	}
	off := r.offset()
	idx, err := r.s33()
	if err != nil {
		return err
	}
	if idx < 0 {
		return laterTypes(unsupportedAt(off, "block type %d (typed function references or GC)", idx))
	}
	return nil
}

// emit copies expr into out with the charges inserted.
func (w *walker) emit(out, expr []byte, g, s64, s32 uint32) []byte {
	prev := 0
	bi := 0
	for _, reg := range w.regions {
		for bi < len(w.bulk) && w.bulk[bi] < reg.at {
			out = append(out, expr[prev:w.bulk[bi]]...)
			prev = w.bulk[bi]
			out = appendBulkCharge(out, g, s64, s32)
			bi++
		}
		if !reg.live || reg.cost == 0 {
			continue
		}
		out = append(out, expr[prev:reg.at]...)
		prev = reg.at
		out = appendCharge(out, g, s64, reg.cost)
	}
	for ; bi < len(w.bulk); bi++ {
		out = append(out, expr[prev:w.bulk[bi]]...)
		prev = w.bulk[bi]
		out = appendBulkCharge(out, g, s64, s32)
	}
	return append(out, expr[prev:]...)
}
