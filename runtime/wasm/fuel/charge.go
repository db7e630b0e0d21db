package fuel

// Opcodes used by the emitted charges.
const (
	opUnreachable = 0x00
	opIf          = 0x04
	opEnd         = 0x0b
	opLocalGet    = 0x20
	opLocalSet    = 0x21
	opLocalTee    = 0x22
	opGlobalGet   = 0x23
	opGlobalSet   = 0x24
	opI64Const    = 0x42
	opI64LtS      = 0x53
	opI64Sub      = 0x7d
	opI64ShrU     = 0x88
	opI64ExtendU  = 0xad
	blockEmpty    = 0x40
)

// appendCharge emits
//
//	global.get $fuel; i64.const cost; i64.sub; local.tee $s
//	global.set $fuel; local.get $s; i64.const 0; i64.lt_s
//	if; unreachable; end
//
// It leaves the operand stack as it found it, so it is valid anywhere an
// instruction is, and the scratch local keeps the new value out of memory
// for the test.
func appendCharge(b []byte, g, s uint32, cost int64) []byte {
	b = append(b, opGlobalGet)
	b = appendU32(b, g)
	b = append(b, opI64Const)
	b = appendS64(b, cost)
	b = append(b, opI64Sub)
	return appendStoreAndCheck(b, g, s)
}

// appendBulkCharge emits, before a bulk operation whose last operand n (an
// i32 count of bytes or elements) is on top of the stack:
//
//	local.tee $n; local.get $n; i64.extend_i32_u; i64.const BulkShift
//	i64.shr_u; local.set $s; global.get $fuel; local.get $s; i64.sub
//	<store and check as in appendCharge>
//
// leaving n on the stack for the operation itself.
func appendBulkCharge(b []byte, g, s64, s32 uint32) []byte {
	b = append(b, opLocalTee)
	b = appendU32(b, s32)
	b = append(b, opLocalGet)
	b = appendU32(b, s32)
	b = append(b, opI64ExtendU, opI64Const, BulkShift, opI64ShrU, opLocalSet)
	b = appendU32(b, s64)
	b = append(b, opGlobalGet)
	b = appendU32(b, g)
	b = append(b, opLocalGet)
	b = appendU32(b, s64)
	b = append(b, opI64Sub)
	return appendStoreAndCheck(b, g, s64)
}

// appendStoreAndCheck stores the new fuel value on the stack and traps when
// it is negative.
func appendStoreAndCheck(b []byte, g, s uint32) []byte {
	b = append(b, opLocalTee)
	b = appendU32(b, s)
	b = append(b, opGlobalSet)
	b = appendU32(b, g)
	b = append(b, opLocalGet)
	b = appendU32(b, s)
	return append(b, opI64Const, 0x00, opI64LtS, opIf, blockEmpty, opUnreachable, opEnd)
}
