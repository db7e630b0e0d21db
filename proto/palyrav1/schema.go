package palyrav1

import _ "embed"

// BrowserScriptSchema is the JSON Schema of a browser job's script (the
// browser_script field): 'palyra job submit --browser-schema' prints it,
// and runtime/browser's tests hold its parser to it.
//
//go:embed schema/browser-script.schema.json
var BrowserScriptSchema []byte
