// Package v20170312 is the lab's build shim for the one Tencent Cloud SDK package flanneld links: the Go
// module proxy the lab builds from does not serve github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/vpc,
// and flanneld's main package imports its tencent-vpc backend unconditionally.
//
// Written for rackctl's lab, not the SDK: the few names flannel's backend uses, and every call fails. The lab
// never selects the tencent-vpc backend (it runs vxlan); a flanneld built with this shim says so if asked to.
package v20170312

import "errors"

// ErrNotInLab is what every call returns.
var ErrNotInLab = errors.New("tencent-vpc backend not available: this flanneld was built by rackctl's lab without the Tencent Cloud SDK")

// Filter is a route-table query filter.
type Filter struct {
	Name   *string
	Values []*string
}

// Route is one route of a route table.
type Route struct {
	RouteId              *uint64
	DestinationCidrBlock *string
	GatewayType          *string
	GatewayId            *string
	RouteType            *string
	Enabled              *bool
}

// RouteTable is a VPC route table.
type RouteTable struct {
	RouteTableId *string
	RouteSet     []*Route
}

// DescribeRouteTablesRequest asks for route tables.
type DescribeRouteTablesRequest struct{ Filters []*Filter }

// DescribeRouteTablesResponse answers it.
type DescribeRouteTablesResponse struct {
	Response *struct{ RouteTableSet []*RouteTable }
}

// RoutesRequest creates or deletes routes.
type RoutesRequest struct {
	RouteTableId *string
	Routes       []*Route
}

// Client is never connected.
type Client struct{}

// NewClientWithSecretId returns a client whose calls fail.
func NewClientWithSecretId(_, _, _ string) (*Client, error) { return &Client{}, ErrNotInLab }

// NewDescribeRouteTablesRequest returns an empty request.
func NewDescribeRouteTablesRequest() *DescribeRouteTablesRequest { return &DescribeRouteTablesRequest{} }

// NewCreateRoutesRequest returns an empty request.
func NewCreateRoutesRequest() *RoutesRequest { return &RoutesRequest{} }

// NewDeleteRoutesRequest returns an empty request.
func NewDeleteRoutesRequest() *RoutesRequest { return &RoutesRequest{} }

// DescribeRouteTables fails.
func (*Client) DescribeRouteTables(*DescribeRouteTablesRequest) (*DescribeRouteTablesResponse, error) {
	return nil, ErrNotInLab
}

// CreateRoutes fails.
func (*Client) CreateRoutes(*RoutesRequest) (*struct{}, error) { return nil, ErrNotInLab }

// DeleteRoutes fails.
func (*Client) DeleteRoutes(*RoutesRequest) (*struct{}, error) { return nil, ErrNotInLab }
