"""The scheduling loop: the engine that meets the core, the database and the backends; what a
request writes, what a decision or an attempt's end changes, and how an attempt is started."""
