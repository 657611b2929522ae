"""gputide's controller: observe a GPU fleet, forecast the tide, plan, guard and act.

Layers point one way (see .importlinter): model <- forecast / plan / safety / sim
<- telemetry / actuate <- loop <- cli.
"""

__version__ = "0.1.0"
