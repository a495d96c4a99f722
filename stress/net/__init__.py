"""The chat requests' transport: bytes on a socket to one classified record per request."""
