"""The cluster simulator: scenarios (conf/scenarios), the discrete-event
simulator of leader-side observations, and where its events go."""
