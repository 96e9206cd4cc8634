"""The REST API's common handlers, the admin operations' handlers and the OpenAPI schema."""
