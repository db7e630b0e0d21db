;; Control-flow fixtures for the fuel tests. Rebuild: wat2wasm loops.wat -o loops.wasm
(module
  (memory (export "memory") 1)
  (global $g (mut i32) (i32.const 0))

  ;; sum of 0..n-1 with a counting loop
  (func (export "count") (param $n i32) (result i64)
    (local $i i32) (local $acc i64)
    (block $done
      (loop $top
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (local.set $acc (i64.add (local.get $acc) (i64.extend_i32_u (local.get $i))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $top)))
    (local.get $acc))

  ;; a call-free infinite loop
  (func (export "spin")
    (loop $l (br $l)))

  ;; infinite recursion through calls (traps on fuel or stack)
  (func $rec (export "recurse") (param i32) (result i32)
    (call $rec (i32.add (local.get 0) (i32.const 1))))

  (func $fib (export "fib") (param $n i32) (result i32)
    (if (result i32) (i32.lt_u (local.get $n) (i32.const 2))
      (then (local.get $n))
      (else (i32.add (call $fib (i32.sub (local.get $n) (i32.const 1)))
                     (call $fib (i32.sub (local.get $n) (i32.const 2)))))))

  ;; br_table dispatch inside a loop, nested blocks, if without else, early return
  (func (export "dispatch") (param $n i32) (result i32)
    (local $i i32) (local $acc i32)
    (loop $top
      (block $c3 (block $c2 (block $c1 (block $c0
        (br_table $c0 $c1 $c2 $c3 (i32.rem_u (local.get $i) (i32.const 4))))
        (local.set $acc (i32.add (local.get $acc) (i32.const 1))) (br $c3))
        (local.set $acc (i32.mul (local.get $acc) (i32.const 3))) (br $c3))
        (if (i32.and (local.get $acc) (i32.const 1))
          (then (local.set $acc (i32.xor (local.get $acc) (i32.const 0x55)))))
        (br $c3))
      (global.set $g (i32.add (global.get $g) (i32.const 1)))
      (if (i32.gt_u (local.get $acc) (i32.const 1000000))
        (then (return (i32.const -1))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $top (i32.lt_u (local.get $i) (local.get $n))))
    (local.get $acc))

  ;; unreachable code after br and return, and an untargeted block
  (func (export "dead") (param $x i32) (result i32)
    (block $b
      (br_if $b (local.get $x))
      (return (i32.const 7))
      (drop (i32.const 1))
      (nop))
    (block (nop) (drop (i32.const 2)))
    (i32.const 9))

  ;; writes i*i for i in [0,n) as i32s to memory at 0
  (func (export "squares") (param $n i32)
    (local $i i32)
    (loop $l
      (i32.store (i32.shl (local.get $i) (i32.const 2)) (i32.mul (local.get $i) (local.get $i)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (local.get $n)))))

  (func (export "get_g") (result i32) (global.get $g))
)
