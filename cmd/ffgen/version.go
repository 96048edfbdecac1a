package main

import "runtime/debug"

// module is the module ffgen is built from.
const module = "github.com/ffgen/ffgen"

// version is set at link time by release builds; otherwise versionFrom
// reads it from the build information.
var version = ""

// versionFrom returns the version of the ffgen module a binary was built
// from. Run as a tool (go tool ffgen) the main module is the user's and
// ffgen is a dependency, whose version, or replacement, go.mod chose;
// built inside a clone, ffgen is the main module and its version comes
// from version control, if the build recorded it.
func versionFrom(bi *debug.BuildInfo, ok bool) string {
	if !ok {
		return "devel (no build information)"
	}
	mod := &bi.Main
	if mod.Path != module {
		mod = nil
		for _, d := range bi.Deps {
			if d.Path == module {
				mod = d
				break
			}
		}
	}
	if mod == nil {
		return "devel"
	}
	if r := mod.Replace; r != nil {
		if r.Version != "" && r.Version != "(devel)" { // a directory has no version
			return mod.Version + " (replaced by " + r.Path + " " + r.Version + ")"
		}
		return mod.Version + " (replaced by " + r.Path + ")"
	}
	v := mod.Version
	if v == "" || v == "(devel)" {
		v = "devel"
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += " " + s.Value[:12]
			}
			if s.Key == "vcs.modified" && s.Value == "true" {
				v += " (modified)"
			}
		}
	}
	return v
}

func currentVersion() string {
	if version != "" {
		return version
	}
	return versionFrom(debug.ReadBuildInfo())
}
