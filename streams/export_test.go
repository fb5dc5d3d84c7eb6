package streams

// IsStoreFailed exposes isStoreFailed to the package's external tests.
var IsStoreFailed = isStoreFailed
