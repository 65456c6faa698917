package httpapi

// Patterns are the routes h serves, as registered.
func Patterns(h *Handler) []string { return h.patterns }
