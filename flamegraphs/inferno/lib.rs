// Empty: this crate exists only so cargo fetches inferno's source.
