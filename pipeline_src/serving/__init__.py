"""Starting the servers: ``launcher`` runs the wheel's tritonserver, ``serve`` runs it with the API."""
