"""Text processing shared by the text-embedding ensemble steps: tokenization and pooling."""
