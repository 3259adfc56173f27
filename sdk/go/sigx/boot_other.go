//go:build !linux

package sigx

import "time"

// systemBoot: no boot clock off Linux; turns are judged by the wall clock alone.
func systemBoot() (time.Duration, bool) { return 0, false }
