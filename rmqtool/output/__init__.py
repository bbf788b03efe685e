"""What records look like to users: the row schema and the Arrow form."""
