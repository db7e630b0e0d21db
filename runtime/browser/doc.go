// Package browser runs headless-browser jobs in Chromium, driven over the
// DevTools protocol with chromedp.
//
// An Executor keeps one long-lived Chromium process per job slot (Debian's
// chromium-headless-shell by default, see Detect), whose frames it draws on
// demand, and one more for interactive sessions. It gives every job a fresh
// incognito browser context, so no job sees another's cookies, storage or
// cache. Config.Slots jobs run at once. If a browser dies or stops
// answering, the job on it ends with runtime.ReasonCrashed and the next job
// there starts a new browser.
//
// # Script
//
// Spec.Script is a JSON object (see ParseScript, which is strict):
//
//	{"timeout_ms": 30000,            // optional: each step's default time limit (not the run's)
//	 "steps": [
//	  {"action":"navigate",  "url":"https://example.com/login"},
//	  {"action":"type",      "selector":"#user", "text":"bob"},
//	  {"action":"click",     "selector":"#login"},
//	  {"action":"press",     "key":"Enter"},          // Enter, Tab, Escape, ArrowDown… or one character
//	  {"action":"wait_for",  "selector":"#done"},     // until a matching element is visible
//	  {"action":"wait_for",  "text":"Welcome"},       // until the page text contains it
//	  {"action":"extract",   "selector":"#name", "name":"user"},                   // innerText
//	  {"action":"extract",   "selector":"a", "attribute":"href", "name":"link"},   // an attribute
//	  {"action":"evaluate",  "expression":"1+2", "name":"sum"},  // JSON value; promises are awaited
//	  {"action":"screenshot","name":"page.png"},      // viewport; or "selector", or "full_page":true
//	  {"action":"pdf",       "name":"page.pdf"}
//	 ]}
//
// Every step also takes "timeout_ms" (default: the script's "timeout_ms",
// else Config.StepTimeout). Spec.Timeout (the job's --timeout, default
// Config.DefaultTimeout) bounds the whole run. Steps run in order; the
// first failing step ends the job.
//
// # Result
//
//   - Stdout is a JSON object of the extracted and evaluated values by name,
//     e.g. {"user":"bob","sum":3}; "{}" when there are none. It holds the
//     values gathered before a failure too. It is bounded by Spec.MaxOutput.
//   - Stderr lists the requests the job's network policy refused, one JSON
//     object per line: {"blocked":URL,"type":"Image","reason":"…","by":"fetch"}.
//     "by" is "policy" (a navigate step's URL), "fetch" (DevTools request
//     interception) or "proxy" (the per-job egress proxy); "type" is the
//     resource type as that layer saw it. A blocked sub-resource (image,
//     fetch, iframe, WebSocket…) does not fail the job; a blocked top-level
//     navigation (the job's tab, or a popup it opened) fails the step during
//     which it happened with runtime.ReasonBlocked. After them come the
//     JavaScript dialogs the pages opened, answered at once so they never
//     stall a step (alert and beforeunload accepted, confirm and prompt
//     dismissed): {"dialog":"confirm","message":"…","url":"…","handled":"dismissed"},
//     with "count" when the same dialog came several times in a row.
//   - Artifacts are the screenshots (image/png) and PDFs (application/pdf),
//     each within Config.MaxArtifactBytes and together within
//     Config.MaxArtifactsTotal; a step that would exceed them fails with
//     runtime.ReasonOutputLimit.
//
// Reasons: step_failed (invalid script, a step that could not be done or
// whose step timeout ran out: "step timeout of 2s (set by the script's
// timeout_ms) ran out"), blocked, timeout (the job's deadline: "job timed
// out after 20s (the job's --timeout)"),
// canceled (caller or Close), crashed (browser or page process died or hung),
// output_limit, internal (the browser could not start).
//
// # Network policy
//
// Every request of the job's pages is checked: by Fetch-domain interception
// in the tab, and by a per-job egress proxy that all of the browser
// context's connections go through. A request may proceed only with scheme
// http or https (data:, blob: and about: never reach the network), a host in
// Spec.AllowHosts (exact or a subdomain), and, unless Spec.AllowPrivate, no
// private, loopback, link-local, unspecified or multicast address among the
// host's DNS answers. Downloads are refused. See DESIGN.md for why, and for
// the DNS-rebinding caveat.
package browser
