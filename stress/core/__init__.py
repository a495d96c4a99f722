"""What every layer shares and that imports nothing of stress: small pure helpers."""
