package wasm

import "fmt"

// scanCustom checks the "name" section, which wazero decodes into maps
// sized by its counts; other custom sections are opaque.
func scanCustom(r *reader) error {
	name, err := r.name()
	if err != nil || name != "name" {
		r.off = len(r.b)
		return err
	}
	for !r.done() {
		id, err := r.byte()
		if err != nil {
			return err
		}
		sub, err := r.sub()
		if err != nil {
			return fmt.Errorf("name subsection %d: %w", id, err)
		}
		switch id {
		case 0: // module name
			_, err = sub.name()
		case 1: // function names
			err = scanNameMap(&sub)
		case 2: // local names
			err = each(&sub, "functions with local names", maxNames, 2, func(r *reader) error {
				if _, err := r.u32(); err != nil {
					return err
				}
				return scanNameMap(r)
			})
		default: // skipped by size, by wazero too
			sub.off = len(sub.b)
		}
		if err == nil && !sub.done() {
			// wazero reads known subsections without bounding them by
			// their size: leftover bytes would be decoded unchecked.
			err = fmt.Errorf("%d bytes left over", sub.left())
		}
		if err != nil {
			return fmt.Errorf("name subsection %d: %w", id, err)
		}
	}
	return nil
}

func scanNameMap(r *reader) error {
	return each(r, "names", maxNames, 2, func(r *reader) error {
		if _, err := r.u32(); err != nil {
			return err
		}
		_, err := r.name()
		return err
	})
}
