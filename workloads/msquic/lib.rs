// Empty: this crate exists only so cargo fetches msquic's source.
