package roles

// SubjectsIntersect exposes subjectsIntersect to the tests.
var SubjectsIntersect = subjectsIntersect
