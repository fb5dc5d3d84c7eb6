package report

// CopySnapshot is snapshotCopy for the package's external tests: the
// function encodes the copy taken now.
func (a *Aggregate) CopySnapshot() func() ([]byte, error) { return a.snapshotCopy().encode }
