pub fn target(_d: &[u8]) {}
