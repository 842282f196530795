"""An ML2 mechanism driver for the nodewright real-OpenStack test tier.

Neutron runs without agents here (no OVS, no Linux bridge): no shipped mechanism driver
binds a port then, and Nova fails every server with a network (PortBindingFailed). This
driver binds every port on any host to the first segment, as "ovs" and ACTIVE; Nova's
fake virt driver plugs nothing, so that is all it needs. Loaded by neutron-server through
the entry point setup.sh writes next to it (name: nodewright_bind_all). Test use only.
"""

from neutron_lib import constants
from neutron_lib.api.definitions import portbindings
from neutron_lib.plugins.ml2 import api


class BindAllMechanismDriver(api.MechanismDriver):
    def initialize(self):
        pass

    @property
    def connectivity(self):
        return portbindings.CONNECTIVITY_L2

    def bind_port(self, context):
        for segment in context.segments_to_bind:
            context.set_binding(
                segment[api.ID],
                portbindings.VIF_TYPE_OVS,
                {portbindings.CAP_PORT_FILTER: False},
                status=constants.PORT_STATUS_ACTIVE,
            )
            return
