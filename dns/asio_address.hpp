#pragma once
// Conversions between Asio's addresses and config::ip_address, for the files that hold
// sockets (dns/server.cpp, proxy/*.cpp). Includes Asio: never from a widely included header.

#include <boost/asio/ip/address.hpp>

#include "config/ip.hpp"

namespace cordon::dns {

inline config::ip_address to_ip(const boost::asio::ip::address& a) {
    if (a.is_v4()) {
        return config::ip_address::v4(a.to_v4().to_uint());
    }
    return config::ip_address::v6(a.to_v6().to_bytes());
}

inline boost::asio::ip::address to_asio(const config::ip_address& a) {
    if (a.is_v4()) {
        return boost::asio::ip::address_v4(a.v4_value());
    }
    return boost::asio::ip::address_v6(a.bytes());
}

}  // namespace cordon::dns
