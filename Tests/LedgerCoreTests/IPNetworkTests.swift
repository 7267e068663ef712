import LedgerCore
import XCTest

/// Addresses and networks as the limits and proxy settings read them (inet_pton's strict forms).
final class IPNetworkTests: XCTestCase {
    func testAddressesAreReadStrictlyAndMappedIPv4IsIPv4() {
        XCTAssertEqual(IPAddress("10.1.2.3")?.description, "10.1.2.3")
        XCTAssertEqual(IPAddress("::ffff:10.1.2.3")?.description, "10.1.2.3")
        XCTAssertEqual(IPAddress("[2001:db8::1]")?.description, "2001:db8::1")
        for spelling in ["127.1", "0x7f000001", "2130706433", "0177.0.0.1", "", "fe80::1%eth0", "example.com", "1.2.3.4.5"] {
            XCTAssertNil(IPAddress(spelling), spelling)
        }
    }

    func testClientKeysCountIPv6ByItsSlash64() {
        XCTAssertEqual(IPAddress("2001:db8:1:2::1")?.clientKey, "2001:db8:1:2::/64")
        XCTAssertEqual(IPAddress("2001:db8:1:2:ffff::9")?.clientKey, IPAddress("2001:db8:1:2::1")?.clientKey)
        XCTAssertNotEqual(IPAddress("2001:db8:1:3::1")?.clientKey, IPAddress("2001:db8:1:2::1")?.clientKey)
        XCTAssertEqual(IPAddress("203.0.113.5")?.clientKey, "203.0.113.5")
    }

    func testNetworksContainTheirAddressesOnly() throws {
        let lan = try IPNetwork("10.0.0.0/8")
        XCTAssertTrue(lan.contains(IPAddress("10.255.0.1")!))
        XCTAssertFalse(lan.contains(IPAddress("11.0.0.1")!))
        XCTAssertFalse(lan.contains(IPAddress("::ffff:11.0.0.1")!))
        XCTAssertTrue(lan.contains(IPAddress("::ffff:10.0.0.1")!), "a mapped address is its IPv4 address")
        XCTAssertEqual(try IPNetwork("10.1.2.3/8").description, "10.0.0.0/8", "host bits are cleared")
        XCTAssertEqual(try IPNetwork("::1").description, "::1/128")
        XCTAssertTrue(try IPNetwork("fd00::/8").contains(IPAddress("fd12:3456::1")!))
        XCTAssertFalse(try IPNetwork("fd00::/8").contains(IPAddress("10.0.0.1")!), "families never match")
        XCTAssertTrue(try IPNetwork("0.0.0.0/0").contains(IPAddress("8.8.8.8")!))
        for bad in ["10.0.0.0/33", "10.0.0.0/-1", "10.0.0.0/", "10.0.0.0/8/8", "::/129", "10.0.0.0/٨"] {
            XCTAssertThrowsError(try IPNetwork(bad), bad)
        }
        XCTAssertEqual(try IPNetwork.list(" 10.0.0.0/8 ,, ::1 ").map(\.description), ["10.0.0.0/8", "::1/128"])
    }

    func testTheClientIsTheRightMostAddressNoTrustedProxyWrote() throws {
        let proxies = try IPNetwork.list("10.0.0.0/8")
        func client(_ peer: String, xff: String? = nil, forwarded: String? = nil) -> String? {
            ClientAddress.resolve(peer: peer, forwardedFor: xff, forwarded: forwarded, trustedProxies: proxies)
        }
        XCTAssertEqual(client("203.0.113.9", xff: "198.51.100.1"), "203.0.113.9", "an untrusted peer's headers are ignored")
        XCTAssertEqual(client("10.0.0.2", xff: "198.51.100.1"), "198.51.100.1")
        XCTAssertEqual(client("10.0.0.2", xff: "1.1.1.1, 198.51.100.1, 10.0.0.7"), "198.51.100.1")
        XCTAssertEqual(client("10.0.0.2"), "10.0.0.2", "no header: the proxy itself")
        XCTAssertEqual(client("10.0.0.2", forwarded: #"for=192.0.2.60;proto=http, for="[2001:db8:cafe::17]:4711""#), "2001:db8:cafe::17")
        XCTAssertEqual(client("10.0.0.2", xff: "10.0.0.5, 10.0.0.6"), "10.0.0.5", "every hop trusted: the left-most")
        XCTAssertEqual(client("10.0.0.2", xff: "unknown"), "unknown", "what a trusted proxy wrote, kept as text")
        XCTAssertEqual(ClientAddress.resolve(peer: "10.0.0.2", forwardedFor: "198.51.100.1", forwarded: nil, trustedProxies: []), "10.0.0.2")
    }
}
