// conveyor/s3/detail/xml.hpp — reading and writing the XML documents of the S3 API
// (internal: the client's; definitions in detail/impl/xml.ipp).
#ifndef CONVEYOR_S3_DETAIL_XML_HPP
#define CONVEYOR_S3_DETAIL_XML_HPP

#include <conveyor/detail/config.hpp>

#include <conveyor/s3/error.hpp>

#include <boost/property_tree/ptree_fwd.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace conveyor::s3 {

struct list_page;

namespace detail {

namespace pt = boost::property_tree;

/// Parses `body` as XML; throws `errc::bad_reply` naming `what` when it is not well-formed.
CONVEYOR_DECL pt::ptree parse_xml(std::string_view body, std::string_view what);

// S3 percent-encodes keys in listings when asked to (encoding-type=url), with '+' for a space.
CONVEYOR_DECL std::string url_decoded(std::string_view s, bool encoded);

CONVEYOR_DECL std::string xml_escaped(std::string_view s);

/** Reads an S3 error reply. A body that is empty or not S3's `<Error>` document (a proxy's
    HTML page, a HEAD reply) still gives the status, and `request_id` from the header. */
CONVEYOR_DECL reply_error parse_error_reply(unsigned status, std::string_view body, std::string_view request_id_header = {});

/// Reads a ListObjectsV2 reply (`<ListBucketResult>`); throws `errc::bad_reply`.
/// (`list_page` is defined in conveyor/s3/types.hpp.)
CONVEYOR_DECL list_page parse_list_page(std::string_view body);

/// Reads the upload id from a CreateMultipartUpload reply (`<InitiateMultipartUploadResult>`).
CONVEYOR_DECL std::string parse_upload_id(std::string_view body);

/// Reads a CompleteMultipartUpload reply: the ETag, or an `<Error>` that S3 may send with
/// status 200 (the request then failed although the status says otherwise).
CONVEYOR_DECL std::optional<reply_error> complete_reply_error(std::string_view body);

/// The CompleteMultipartUpload request body for parts 1..n with their ETags.
/// CompleteMultipartUpload's body: each part's number and ETag, and with `checksum_name`
/// ("CRC64NVME"...) its checksum (`checksums`, base64) as `<Checksum<name>>`.
CONVEYOR_DECL std::string complete_multipart_body(const std::vector<std::string>& etags, std::string_view checksum_name = {},
                                                  const std::vector<std::string>& checksums = {});

} // namespace detail
} // namespace conveyor::s3

#if CONVEYOR_HEADER_ONLY
#include <conveyor/s3/detail/impl/xml.ipp>
#endif

#endif
