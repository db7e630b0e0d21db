;; WebAssembly 2.0 feature fixtures for the fuel tests.
;; Rebuild: wat2wasm features.wat -o features.wasm
(module
  (type $pair (func (param i32 i32) (result i32 i32)))
  (import "env" "base" (global $base i32))
  (import "env" "mbase" (global $mbase (mut i64)))
  (memory (export "memory") 1)
  (table $t 4 funcref)
  (table $ext 2 externref)
  (global $counter (mut i32) (i32.const 0))
  (global $k i64 (i64.const 42))
  (data $d "hello, fuel!")
  (elem $e func $swap $addsub)
  (elem declare func $swap)

  (func $swap (type $pair) (local.get 1) (local.get 0))
  (func $addsub (param i32 i32) (result i32 i32)
    (i32.add (local.get 0) (local.get 1))
    (i32.sub (local.get 0) (local.get 1)))

  ;; multi-value blocks with type-index block types, calls returning pairs
  (func (export "multi") (param $a i32) (param $b i32) (result i32)
    (local.get $a) (local.get $b)
    (block (type $pair) (call $swap))
    (if (type $pair) (i32.const 1)
      (then (call $addsub))
      (else (drop) (drop) (i32.const 0) (i32.const 0)))
    (loop (type $pair) (call $swap))
    (i32.mul))

  ;; sign extension, saturating truncation, typed select
  (func (export "numeric") (param $x i64) (param $f f64) (result i64)
    (i64.extend8_s (local.get $x))
    (i64.extend32_s (local.get $x))
    (i64.add)
    (i64.trunc_sat_f64_s (local.get $f))
    (i64.add)
    (i64.extend_i32_s (i32.extend16_s (i32.trunc_sat_f32_u (f32.demote_f64 (local.get $f)))))
    (i64.add)
    (select (result i64) (global.get $k) (i64.const 1) (i32.wrap_i64 (local.get $x)))
    (i64.add)
    (i64.add (i64.extend_i32_u (global.get $base)) (global.get $mbase))
    (i64.add))

  ;; bulk memory: init, copy, fill; returns a checksum of memory[0..64)
  (func (export "bulk") (param $n i32) (result i32)
    (local $i i32) (local $sum i32)
    (memory.init $d (i32.const 0) (i32.const 0) (i32.const 12))
    (memory.copy (i32.const 16) (i32.const 0) (i32.const 12))
    (memory.fill (i32.const 32) (i32.const 0x2a) (local.get $n))
    (data.drop $d)
    (loop $l
      (local.set $sum (i32.add (i32.mul (local.get $sum) (i32.const 31)) (i32.load8_u (local.get $i))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const 64))))
    (local.get $sum))

  ;; memory.fill in dead code after return needs no charge
  (func (export "deadbulk") (result i32)
    (return (i32.const 3))
    (memory.fill (i32.const 0) (i32.const 0) (i32.const 0)))

  ;; a big fill, charged by size
  (func (export "fill") (param $n i32)
    (memory.fill (i32.const 0) (i32.const 1) (local.get $n)))

  ;; reference types and table operations
  (func (export "tables") (result i32)
    (table.init $t $e (i32.const 0) (i32.const 0) (i32.const 2))
    (elem.drop $e)
    (table.copy $t $t (i32.const 2) (i32.const 0) (i32.const 2))
    (table.set $t (i32.const 3) (ref.func $swap))
    (drop (table.grow $t (ref.null func) (i32.const 3)))
    (table.fill $t (i32.const 5) (ref.null func) (i32.const 2))
    (table.set $ext (i32.const 0) (ref.null extern))
    (i32.add
      (i32.add (table.size $t) (ref.is_null (table.get $t (i32.const 6))))
      (i32.add (ref.is_null (table.get $ext (i32.const 1)))
        (call_indirect $t (type $pair) (i32.const 10) (i32.const 3) (i32.const 1)) (drop))))

  ;; SIMD: const, shuffle, lanes, loads/stores with memargs, lane loads
  (func (export "simd") (result i64)
    (local $v v128)
    (v128.store offset=64 (i32.const 0)
      (v128.const i32x4 1 2 3 4))
    (local.set $v (v128.load offset=64 align=16 (i32.const 0)))
    (local.set $v (i32x4.add (local.get $v) (v128.load32_splat offset=64 (i32.const 0))))
    (local.set $v (i8x16.shuffle 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 (local.get $v) (local.get $v)))
    (local.set $v (v128.load32_lane offset=68 2 (i32.const 0) (local.get $v)))
    (v128.store64_lane offset=96 1 (i32.const 0) (local.get $v))
    (local.set $v (i32x4.replace_lane 3 (local.get $v) (i32.const 100)))
    (local.set $v (v128.load64_zero offset=96 (i32.const 0)))
    (i64.add
      (i64.extend_i32_s (i32x4.extract_lane 0 (local.get $v)))
      (i64x2.extract_lane 1 (i64x2.mul (local.get $v) (i64x2.splat (i64.const 3)))))
    (i64.add (i64.extend_i32_u (v128.any_true (local.get $v))))
    (i64.add (i64.extend_i32_s (i8x16.extract_lane_s 4 (f32x4.demote_f64x2_zero (f64x2.splat (f64.const 1.5)))))))

  (func $tick (global.set $counter (i32.add (global.get $counter) (i32.const 1))))
  (func (export "counter") (result i32) (global.get $counter))
  (start $tick)
  (export "table" (table $t))
)
