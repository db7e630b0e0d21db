import { defineConfig } from "vite";

// The build lands in dist/, which the Go package embeds: the binary serves
// it, nothing is fetched at run time.
export default defineConfig({
  base: "./",
  build: { outDir: "dist", emptyOutDir: true, assetsInlineLimit: 0, sourcemap: false },
});
