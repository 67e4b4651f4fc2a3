// conveyor/s3/detail/impl/xml.ipp — definitions for conveyor/s3/detail/xml.hpp.
#ifndef CONVEYOR_S3_DETAIL_IMPL_XML_IPP
#define CONVEYOR_S3_DETAIL_IMPL_XML_IPP

#include <conveyor/s3/detail/xml.hpp>

#include <conveyor/core/error.hpp>
#include <conveyor/s3/types.hpp>

#include <boost/property_tree/ptree.hpp>
#include <boost/property_tree/xml_parser.hpp>
#include <boost/url/decode_view.hpp>
#include <boost/url/pct_string_view.hpp>

#include <cstdint>
#include <sstream>

namespace conveyor::s3::detail {

CONVEYOR_DECL pt::ptree parse_xml(std::string_view body, std::string_view what)
{
    pt::ptree tree;
    std::istringstream in{std::string(body)};
    try {
        pt::read_xml(in, tree, pt::xml_parser::no_comments);
    } catch (const pt::xml_parser_error& e) {
        throw conveyor::error(make_error_code(errc::bad_reply),
                              {.stage = "s3", .detail = std::string(what) + " is not well-formed XML: " + e.message()});
    }
    return tree;
}

CONVEYOR_DECL std::string url_decoded(std::string_view s, bool encoded)
{
    if (!encoded) return std::string(s);
    auto pct = boost::urls::make_pct_string_view(s);
    if (!pct) throw conveyor::error(make_error_code(errc::bad_reply), {.stage = "s3", .detail = "listing holds a badly encoded key '" + std::string(s) + "'"});
    boost::urls::encoding_opts opt;
    opt.space_as_plus = true;
    std::string out;
    out.reserve(s.size());
    for (char c : boost::urls::decode_view(*pct, opt)) out.push_back(c);
    return out;
}

CONVEYOR_DECL std::string xml_escaped(std::string_view s)
{
    std::string out;
    out.reserve(s.size());
    for (char c : s) {
        switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&quot;"; break;
        case '\'': out += "&apos;"; break;
        default: out.push_back(c);
        }
    }
    return out;
}

CONVEYOR_DECL reply_error parse_error_reply(unsigned status, std::string_view body, std::string_view request_id_header)
{
    reply_error r;
    r.status = status;
    r.request_id = std::string(request_id_header);
    if (body.find("<Error") == std::string_view::npos) return r;
    try {
        auto tree = parse_xml(body, "error reply");
        if (auto e = tree.get_child_optional("Error")) {
            r.code = e->get<std::string>("Code", "");
            r.message = e->get<std::string>("Message", "");
            r.resource = e->get<std::string>("Resource", "");
            if (auto id = e->get_optional<std::string>("RequestId"); id && !id->empty()) r.request_id = *id;
        }
    } catch (const conveyor::error&) {
        // The status alone still says what happened.
    }
    return r;
}

CONVEYOR_DECL list_page parse_list_page(std::string_view body)
{
    auto tree = parse_xml(body, "ListObjectsV2 reply");
    auto root = tree.get_child_optional("ListBucketResult");
    if (!root) throw conveyor::error(make_error_code(errc::bad_reply), {.stage = "s3", .detail = "ListObjectsV2 reply has no <ListBucketResult>"});
    const bool encoded = root->get<std::string>("EncodingType", "") == "url";
    list_page page;
    page.truncated = root->get<std::string>("IsTruncated", "false") == "true";
    page.next_continuation_token = root->get<std::string>("NextContinuationToken", "");
    for (const auto& [name, node] : *root) {
        if (name == "Contents") {
            object_info o;
            o.key = url_decoded(node.get<std::string>("Key", ""), encoded);
            o.etag = node.get<std::string>("ETag", "");
            o.last_modified = node.get<std::string>("LastModified", "");
            if (auto sz = node.get_optional<std::int64_t>("Size")) o.size = *sz;
            if (o.key.empty()) throw conveyor::error(make_error_code(errc::bad_reply), {.stage = "s3", .detail = "ListObjectsV2 reply has an object without a key"});
            page.objects.push_back(std::move(o));
        } else if (name == "CommonPrefixes") {
            page.common_prefixes.push_back(url_decoded(node.get<std::string>("Prefix", ""), encoded));
        }
    }
    if (page.truncated && page.next_continuation_token.empty())
        throw conveyor::error(make_error_code(errc::bad_reply), {.stage = "s3", .detail = "ListObjectsV2 reply is truncated but has no NextContinuationToken"});
    return page;
}

CONVEYOR_DECL std::string parse_upload_id(std::string_view body)
{
    auto tree = parse_xml(body, "CreateMultipartUpload reply");
    std::string id = tree.get<std::string>("InitiateMultipartUploadResult.UploadId", "");
    if (id.empty()) throw conveyor::error(make_error_code(errc::bad_reply), {.stage = "s3", .detail = "CreateMultipartUpload reply has no UploadId"});
    return id;
}

CONVEYOR_DECL std::optional<reply_error> complete_reply_error(std::string_view body)
{
    if (body.find("<Error") == std::string_view::npos) return std::nullopt;
    auto r = parse_error_reply(200, body);
    if (r.code.empty()) return std::nullopt;
    return r;
}

CONVEYOR_DECL std::string complete_multipart_body(const std::vector<std::string>& etags, std::string_view checksum_name,
                                                  const std::vector<std::string>& checksums)
{
    std::string s = "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">";
    for (std::size_t i = 0; i < etags.size(); ++i) {
        s += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>" + xml_escaped(etags[i]) + "</ETag>";
        if (i < checksums.size())
            s += "<Checksum" + std::string(checksum_name) + ">" + checksums[i] + "</Checksum" + std::string(checksum_name) + ">";
        s += "</Part>";
    }
    s += "</CompleteMultipartUpload>";
    return s;
}

} // namespace conveyor::s3::detail

#endif
