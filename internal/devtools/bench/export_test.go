package bench

// ClipForTest is clip.
var ClipForTest = clip
