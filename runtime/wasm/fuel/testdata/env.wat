;; Imports for features.wasm. Rebuild: wat2wasm env.wat -o env.wasm
(module
  (global (export "base") i32 (i32.const 7))
  (global (export "mbase") (mut i64) (i64.const 100)))
