;; cat: copies stdin to stdout through WASI preview 1. The trivial job the
;; control-plane benchmarks run: its own cost is a few microseconds, so
;; what is measured is the control plane.
(module
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start")
    (block $done
      (loop $more
        (i32.store (i32.const 0) (i32.const 1024))
        (i32.store (i32.const 4) (i32.const 60000))
        (br_if $done (i32.ne (call $fd_read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 16)) (i32.const 0)))
        (br_if $done (i32.eqz (i32.load (i32.const 16))))
        (i32.store (i32.const 4) (i32.load (i32.const 16)))
        (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 20)))
        (br $more))))
)
