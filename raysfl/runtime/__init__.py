"""Ray runtime: client, server and fed-server actors, and the driver that runs rounds."""
