package generator

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// write writes every file whose bytes differ from what is on disk and
// returns their paths; with check it only returns them.
func write(files []File, check bool) (stale []string, err error) {
	for _, f := range files {
		old, err := os.ReadFile(f.Path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return stale, err
		}
		if err == nil && bytes.Equal(old, f.Content) {
			continue
		}
		stale = append(stale, f.Path)
		if check {
			continue
		}
		if err := writeAtomic(f.Path, f.Content); err != nil {
			return stale, err
		}
	}
	return stale, nil
}

// writeAtomic replaces name by renaming a complete temporary file over it,
// so a reader (or a crash) never sees half a file.
func writeAtomic(name string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), name)
}
