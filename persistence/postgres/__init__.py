"""The PostgreSQL store backend: a database shared by an active broker and its standbys."""
