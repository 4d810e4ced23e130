"""Scripts that build every artifact of the model repository from source weights."""
