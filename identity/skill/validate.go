package skill

import (
	"bytes"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// DocError is Validate's answer for a document the schema does not take:
// it is not JSON, or it is and the schema refuses it (Detail:
// DescribeSchemaError's account). Any other error from Validate is the
// schema's own (it does not compile).
type DocError struct {
	NotJSON bool
	Detail  string
}

func (e *DocError) Error() string {
	if e.NotJSON {
		return "not JSON: " + e.Detail
	}
	return "does not match the schema: " + e.Detail
}

// compiled caches compiled schemas by their text: a tool's schema is
// checked on every run, submit or hook of it, and a cluster holds few
// skills. Dropped whole if it ever grows past maxCompiled.
var compiled struct {
	sync.Mutex
	m map[string]*jsonschema.Schema
}

const maxCompiled = 256

// Validate checks the JSON document doc against the JSON Schema schema
// (a tool's input_schema or output_schema). A document it does not take
// gets a *DocError; a schema that does not compile, another error.
func Validate(schema string, doc []byte) error {
	compiled.Lock()
	sch := compiled.m[schema]
	compiled.Unlock()
	if sch == nil {
		var err error
		if sch, err = CompileSchema(schema); err != nil {
			return err
		}
		compiled.Lock()
		if compiled.m == nil || len(compiled.m) >= maxCompiled {
			compiled.m = map[string]*jsonschema.Schema{}
		}
		compiled.m[schema] = sch
		compiled.Unlock()
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return &DocError{NotJSON: true, Detail: err.Error()}
	}
	if err := sch.Validate(v); err != nil {
		return &DocError{Detail: DescribeSchemaError(err)}
	}
	return nil
}
