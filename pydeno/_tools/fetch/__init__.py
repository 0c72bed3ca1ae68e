"""``HttpFetch``: the policy a request must pass (``policy``), the transport that connects
only to addresses the policy allows (``transport``), and the client the guest calls
(``client``)."""
