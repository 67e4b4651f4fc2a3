// conveyor/s3/impl/credentials.ipp — definitions for conveyor/s3/credentials.hpp.
#ifndef CONVEYOR_S3_IMPL_CREDENTIALS_IPP
#define CONVEYOR_S3_IMPL_CREDENTIALS_IPP

#include <conveyor/s3/credentials.hpp>

#include <string>

namespace conveyor::s3 {

CONVEYOR_DECL std::string credentials::describe() const
{
    if (anonymous()) return "anonymous access" + (source.empty() ? std::string() : " (" + source + ")");
    std::string id = access_key_id.size() > 8 ? access_key_id.substr(0, 4) + "..." + access_key_id.substr(access_key_id.size() - 4)
                                              : access_key_id;
    return "access key " + id + (source.empty() ? std::string() : " from " + source);
}

} // namespace conveyor::s3

#endif
