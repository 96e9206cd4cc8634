from gpuspawner.exit_now import exit_now
from gpuspawner.hub.exit_reason import recording
from gpuspawner.service.app import main

recording(main)  # a failed start's reason, for the hub to print (hub/app.py)
exit_now()  # its state is in the database, its jobs run on by design
